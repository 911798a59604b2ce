"""``warpforge serve``: run the language server (stdio; ``--tcp [HOST:]PORT`` for debugging).

The TCP form serves an unauthenticated LSP: whoever connects can open files, read hints and start compiles
and GPU jobs as this user. So it listens on the loopback address unless told otherwise, and any other address
gets a warning on stderr. The address is checked before the server starts (one line and exit 2 on a bad one).
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from typing import Any

#: a host name as DNS writes it (letters, digits, hyphens, dots)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?")
LOOPBACK = "127.0.0.1"


def tcp_address(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` as (host, port); the host defaults to the loopback address."""
    value = text.strip()
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\w+)", value)
    if m is not None:
        host, port = m.group(1), m.group(2)
    elif ":" in value:
        host, _, port = value.rpartition(":")
    else:
        host, port = "", value
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"`{text}` is not [HOST:]PORT (a port is a number from 1 to 65535), "
                                         f"e.g. --tcp 2087 or --tcp {LOOPBACK}:2087")
    if host:
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            if not _HOSTNAME.fullmatch(host):
                raise argparse.ArgumentTypeError(f"`{host}` in `{text}` is not an IP address or host name, e.g. "
                                                 f"--tcp {LOOPBACK}:{port}") from None
    return host or LOOPBACK, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (127.0.0.0/8, ::1, ``localhost``)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, port: int) -> str | None:
    """The stderr warning for serving on ``host`` (None on a loopback address)."""
    if is_loopback(host):
        return None
    return (f"warpforge: warning: serving the language server on {host}:{port}, which other machines can reach: "
            "it has no authentication, and whoever connects can open files and start compiles and GPU jobs as "
            f"you. Serve on {LOOPBACK} (the default) and reach it through an SSH tunnel instead.")


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the language server (used by the VS Code extension)")
    p.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    p.add_argument("--tcp", metavar="[HOST:]PORT", type=tcp_address,
                   help=f"listen on a TCP port instead (debugging; HOST defaults to {LOOPBACK}: the server is "
                        "unauthenticated)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until the client leaves; the process exits from here with 0 after ``shutdown`` + ``exit``,
    1 on ``exit`` without ``shutdown`` (the LSP rule), 2 when the client broke the LSP framing."""
    from ..lsp.server import serve

    if args.tcp is not None:
        warning = exposure_warning(*args.tcp)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
    serve(args.tcp)
