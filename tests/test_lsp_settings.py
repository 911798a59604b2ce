"""A refused editor setting is shown to the user, not only logged (the real server over stdio)."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

from lsp_raw import RawServer


def _shown(s: RawServer, want: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        try:
            msg = s.messages.get(timeout=0.1)
        except queue.Empty:
            continue
        if msg.get("method") == "window/showMessage":
            out.append(msg["params"])
    return out


def test_bad_setting_values_are_shown_as_warnings_and_ignored(tmp_path: Path) -> None:
    s = RawServer(tmp_path)
    try:
        s.initialize(tmp_path, {"warpforge": {"trusted": False}})
        s.notify("workspace/didChangeConfiguration",
                 {"settings": {"warpforge": {"budget": "lots", "timeBudget": -5, "maxDocumentSize": 0}}})
        shown = _shown(s, 3)
        texts = [m["message"] for m in shown]
        assert len(texts) == 3, texts
        assert all(m["type"] == 2 for m in shown)  # MessageType.Warning
        assert any("warpforge.budget = 'lots' ignored: expected a whole number; keeping 48" in t for t in texts), texts
        assert any("warpforge.timeBudget = -5 ignored: must be above 0.0" in t for t in texts), texts
        assert any("warpforge.maxDocumentSize = 0 ignored: must be at least 1" in t for t in texts), texts
    finally:
        s.close()
