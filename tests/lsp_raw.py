"""A raw byte-level client of the real language server process, started the way the extension starts it.

The interpreter flags, arguments and environment come from the extension's own ``extension/src/launch.json``
(``python -P -m warpforge serve`` with ``PYTHONSAFEPATH=1``), the working directory is outside any workspace;
stdin takes raw bytes (so tests can send what no well-behaved client would), stdout is split into frames
on a reader thread, stderr is collected for the logged reasons.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: how the extension starts Python (extension/src/launch.ts reads the same file)
LAUNCH = json.loads((ROOT / "extension" / "src" / "launch.json").read_text())
SERVER_COMMAND = [sys.executable, *LAUNCH["pythonFlags"], *LAUNCH["serverArgs"]]


def server_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    # No empty entry: Python reads one as the working directory, which would put the workspace back on the path.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT / "server"), env.get("PYTHONPATH", "")] if p)
    env.update(LAUNCH["env"])
    env.update(extra)
    return env


def frame(payload: dict[str, Any] | bytes) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawServer:
    def __init__(self, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(SERVER_COMMAND, cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env or server_env())
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stderr = b""
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line == b"\r\n":
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None
            self.messages.put(json.loads(out.read(length)))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr += line

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the server already closed the connection

    def request(self, msg_id: int, method: str, params: Any = None) -> None:
        self.send(frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}))

    def notify(self, method: str, params: Any = None) -> None:
        self.send(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def response(self, msg_id: Any, timeout: float = 20.0) -> dict[str, Any] | None:
        """The response with this id (skipping notifications), or None when the server exited first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.messages.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None and self.messages.empty():
                    return None
                continue
            if "method" not in msg and msg.get("id") == msg_id:
                return msg
        raise AssertionError(f"no response to id {msg_id} within {timeout} s and the server is still running")

    def initialize(self, root: Path, options: dict[str, Any] | None = None) -> dict[str, Any]:
        self.request(0, "initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {},
                                       "initializationOptions": options or {}})
        resp = self.response(0, timeout=60)
        assert resp is not None and "result" in resp, resp
        self.notify("initialized", {})
        return resp

    def exit_status(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
