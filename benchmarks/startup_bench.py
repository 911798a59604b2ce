"""Language-server start-up (issue 29 item 6): from spawning the server to the first source hint on screen.

The server is started as the extension starts it (``python -P -m warpforge serve``, ``PYTHONSAFEPATH=1``, a
neutral working directory, trusted: both hint phases), through a real LSP client over stdio (pygls, as
pytest-lsp drives it). One sample is one fresh process:

- ``initialize_s``: spawn -> the initialize answer (interpreter start and the server's imports);
- ``first_hint_s``: spawn -> the first publishDiagnostics of the opened file that carries a source hint
  (the client sends didOpen right after ``initialized``, as VS Code does when a .cu file is open);
- ``compiler_s``: spawn -> the publish that carries the compiler/SASS phase (nvcc, nvdisasm), when nvcc is here.

"Warm machine": the first sample (byte code compiled, files in the page cache) is reported but not counted.
A fresh hint cache per sample, so the compiler phase really compiles.

    .venv/bin/python benchmarks/startup_bench.py [--runs 6] [--file kernels/saxpy.cu] [--pythonpath DIRS]
        [--out startup.json]

``--pythonpath`` runs another copy of the server (e.g. the .vsix's ``bundled/libs-cp3XX:bundled/libs``)
with ``python -I``-like isolation: the interpreter's own site-packages are still used unless ``--python`` names
a clean one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient
from pytest_lsp import client_capabilities

ROOT = Path(__file__).resolve().parent.parent


async def one_run(python: str, pythonpath: str | None, source: Path, timeout: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="wf-startup-"))
    (work / "ws").mkdir()
    target = work / "ws" / source.name
    text = source.read_text()
    target.write_text(text)
    uri = target.as_uri()
    env = dict(os.environ, PYTHONSAFEPATH="1", WARPFORGE_CACHE=str(work / "cache"))
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    client = LanguageClient("warpforge-startup-bench", "1")
    pubs: list[tuple[float, list[lsp.Diagnostic]]] = []

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_pub(params: lsp.PublishDiagnosticsParams) -> None:
        if params.uri == uri:
            pubs.append((time.monotonic(), list(params.diagnostics)))

    t0 = time.monotonic()
    await client.start_io(python, "-P", "-m", "warpforge", "serve", env=env, cwd=str(work))
    await client.initialize_async(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=(work / "ws").as_uri(),
        initialization_options={"warpforge": {"trusted": True}}))
    t_init = time.monotonic()
    client.initialized(lsp.InitializedParams())
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, "cuda-cpp", 1, text)))
    first = compiler = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and compiler is None:
        for t, diags in pubs:
            sources = {d.source or "" for d in diags}
            if first is None and any(d.code and str(d.code).startswith("WF1") for d in diags):
                first = t
            if any("compiler" in s or "sass" in s for s in sources) or len(pubs) >= 2:
                compiler = t
        await asyncio.sleep(0.005)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"initialize_s": round(t_init - t0, 3),
            "first_hint_s": round(first - t0, 3) if first else None,
            "compiler_s": round(compiler - t0, 3) if compiler else None,
            "publishes": len(pubs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--file", type=Path, default=ROOT / "kernels" / "saxpy.cu")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pythonpath", default=None, help="PYTHONPATH of the server (default: inherited)")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    samples = [asyncio.run(one_run(a.python, a.pythonpath, a.file, a.timeout)) for _ in range(a.runs)]
    warm = samples[1:] or samples

    def med(key: str) -> float | None:
        vals = [s[key] for s in warm if s[key] is not None]
        return round(statistics.median(vals), 3) if vals else None

    result = {"machine": f"{os.cpu_count()} cores", "load": os.getloadavg()[0], "python": a.python,
              "file": str(a.file), "samples": samples,
              "warm_median": {k: med(k) for k in ("initialize_s", "first_hint_s", "compiler_s")}}
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
