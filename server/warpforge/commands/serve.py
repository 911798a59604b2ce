"""``warpforge serve``: run the language server (stdio; ``--tcp HOST:PORT`` for debugging)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the language server (used by the VS Code extension)")
    p.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    p.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP port instead (debugging)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until the client leaves; the process exits from here with 0 after ``shutdown`` + ``exit``,
    1 on ``exit`` without ``shutdown`` (the LSP rule), 2 when the client broke the LSP framing."""
    from ..lsp.server import serve

    serve(args.tcp)
