"""Restricted Mode: in a workspace the editor does not trust, the server runs no tool on its code.

Compiler and SASS hints run nvcc and nvdisasm on the file, Profile runs ncu and the kernel, Optimize
builds and runs candidates: each executes (or feeds a toolchain) code from the repository. The editor
knows whether the user trusts the workspace and says so in ``initializationOptions.warpforge.trusted``
(and again on ``workspace/didChangeConfiguration``). Untrusted: hints come from source patterns only,
Optimize and Profile are refused with the reason, and one notice says what is off and how to turn it on.
A client that does not say (editors without workspace trust, the CLI's tests) is trusted: it started the
server for this folder on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

if TYPE_CHECKING:
    from .server import WarpForgeServer

NOTICE = ("WarpForge (Restricted Mode): hints come from source patterns only. Compiler, register and SASS hints, "
          "Optimize and Profile are off, because they run nvcc and your GPU on this workspace's code. Trust the "
          "workspace (Manage Workspace Trust) to turn them on.")


class Trust:
    def __init__(self) -> None:
        self.trusted = True
        self._noticed = False

    def update(self, options: Any) -> bool:
        """Read ``trusted`` from a settings object (possibly nested under "warpforge"); True if it changed."""
        if not isinstance(options, dict):
            return False
        if isinstance(options.get("warpforge"), dict):
            options = options["warpforge"]
        value = options.get("trusted")
        if not isinstance(value, bool) or value == self.trusted:
            return False
        self.trusted = value
        return True

    def check(self, what: str) -> str | None:
        """Why ``what`` may not run here (a user-facing sentence), or None."""
        if self.trusted:
            return None
        return (f"{what} compiles and runs this workspace's code, so it is off in Restricted Mode: trust the "
                "workspace (Manage Workspace Trust) to use it")

    def notice(self, server: WarpForgeServer) -> None:
        """Say once per session what Restricted Mode turned off."""
        if self.trusted or self._noticed:
            return
        self._noticed = True
        server.window_show_message(lsp.ShowMessageParams(lsp.MessageType.Info, NOTICE))
