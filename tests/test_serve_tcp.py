"""``serve --tcp`` checked and loopback by default; the project's refused options said on the CLI's stderr.

Real processes: the server is started on a TCP port and answers ``initialize`` over a socket; the listening
address is read from ``/proc/net/tcp``; ``warpforge hints`` runs on a project whose build names options
WarpForge does not pass on.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warpforge.commands.serve import exposure_warning, is_loopback, tcp_address

ROOT = Path(__file__).resolve().parents[1]
SAXPY = (ROOT / "kernels" / "saxpy.cu").read_text()


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = str(ROOT / "server")
    env["WARPFORGE_CACHE"] = str(tmp / "cache")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> str | None:
    """The local address (hex, as /proc/net/tcp writes it) listening on ``port``, or None."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        addr, _, hexport = fields[1].partition(":")
        if int(hexport, 16) == port and fields[3] == "0A":
            return addr
    return None


def _initialize(port: int) -> dict[str, object]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"processId": None, "rootUri": None, "capabilities": {}}}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                      if k.strip().lower() == b"content-length")
        while len(rest) < length:
            rest += s.recv(65536)
    reply: dict[str, object] = json.loads(rest[:length])
    return reply


@pytest.mark.parametrize(("given", "expected"), [("2087", ("127.0.0.1", 2087)), (":2087", ("127.0.0.1", 2087)),
                                                 ("localhost:80", ("localhost", 80)), ("[::1]:9000", ("::1", 9000)),
                                                 ("0.0.0.0:2087", ("0.0.0.0", 2087))])
def test_tcp_addresses_are_read_with_the_loopback_as_the_default_host(given: str, expected: tuple[str, int]) -> None:
    assert tcp_address(given) == expected


def test_only_loopback_addresses_are_served_without_a_warning() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    for host in ("0.0.0.0", "::", "192.168.1.5", "build-box"):
        warning = exposure_warning(host, 2087)
        assert warning is not None and "no authentication" in warning and "start compiles" in warning


@pytest.mark.parametrize("bad", ["abc", "0", "65536", "host:", "a b:80", "-1", "1.2.3.4:http"])
def test_a_bad_tcp_address_is_one_line_and_the_usage_exit_code(tmp_path: Path, bad: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "warpforge", "serve", "--tcp", bad], capture_output=True, text=True,
                          env=_env(tmp_path), timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--tcp" in lines[0]
    assert "[HOST:]PORT" in lines[0] or "not an IP address" in lines[0]
    assert "Traceback" not in proc.stderr and "unexpected" not in proc.stderr


@pytest.mark.parametrize(("host", "hex_addr", "warned"), [(None, "0100007F", False), ("0.0.0.0", "00000000", True)])
def test_the_server_listens_on_loopback_by_default_and_warns_for_other_addresses(
        tmp_path: Path, host: str | None, hex_addr: str, warned: bool) -> None:
    port = _free_port()
    arg = str(port) if host is None else f"{host}:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "warpforge", "serve", "--tcp", arg], env=_env(tmp_path),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while _listening(port) is None and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert _listening(port) == hex_addr
        reply = _initialize(port)
        assert "result" in reply and "capabilities" in reply["result"]  # type: ignore[operator]
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert ("no authentication" in err) is warned, err


def test_the_cli_lists_each_refused_project_option_on_stderr_naming_the_file(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "build").mkdir(parents=True)
    (proj / "k.cu").write_text(SAXPY)
    (proj / "build" / "opts.rsp").write_text("-I../inc -Xcompiler -fplugin=/tmp/p.so\n")
    (proj / "inc").mkdir()
    db = proj / "compile_commands.json"
    db.write_text(json.dumps([{"directory": str(proj / "build"), "file": str(proj / "k.cu"),
                               "arguments": ["nvcc", "-ccbin", "/opt/evil/g++", "-Xcompiler", "-wrapper,/bin/sh",
                                             "--options-file", "opts.rsp", "-O3", "-c", "../k.cu"]}], indent=1))
    proc = subprocess.run([sys.executable, "-m", "warpforge", "hints", "--no-compile", str(proj / "k.cu"),
                           str(proj / "k.cu")], capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    warnings = [ln for ln in proc.stderr.splitlines() if "is not passed on to nvcc" in ln]
    lines = db.read_text().splitlines()
    ccbin_line = next(i + 1 for i, t in enumerate(lines) if '"-ccbin"' in t)
    assert warnings[0] == (f"{db}:{ccbin_line}: warning: `-ccbin /opt/evil/g++` is not passed on to nvcc: refused, "
                           "names the host compiler to run"), proc.stderr
    assert any("`-Xcompiler -wrapper,/bin/sh`" in w for w in warnings)
    assert any("`-Xcompiler -fplugin=/tmp/p.so`" in w for w in warnings)
    assert len(warnings) == 3  # said once, though the file is given twice
    assert "not passed on" not in proc.stdout


def test_python_dash_p_keeps_a_workspace_s_warpforge_py_from_being_imported(tmp_path: Path) -> None:
    """Why docs/security.md tells other editors to start `python -P -m warpforge serve`: plain `python -m`
    puts the working directory (the workspace) first on sys.path and imports a `warpforge.py` found there."""
    (tmp_path / "warpforge.py").write_text("import pathlib; pathlib.Path('imported.marker').write_text('x')\n")
    env = _env(tmp_path)
    env.pop("PYTHONSAFEPATH", None)
    safe = subprocess.run([sys.executable, "-P", "-m", "warpforge", "--version"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert safe.returncode == 0 and safe.stdout.startswith("warpforge ")
    assert not (tmp_path / "imported.marker").exists()
    subprocess.run([sys.executable, "-m", "warpforge", "--version"], cwd=tmp_path, env=env, capture_output=True,
                   timeout=60)
    assert (tmp_path / "imported.marker").exists()  # the hazard the -P form avoids
