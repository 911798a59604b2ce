"""Language-server soak (issue 14): randomized opens, edits, saves and closes over 50 .cu files for a while,
through a real LSP client over stdio, recording the server's memory over time and request latency.

The server is started the way the extension starts it (flags and environment from extension/src/launch.json,
a working directory outside the files' folder, a trusted workspace: both hint phases run, nvcc included).
The 50 files are the kernels/ files with variations (renamed kernels, other block sizes, extra helpers and
comments). Each step is one random action; between steps a short random pause, as typing has:

- open a closed file (up to 20 open at once), close an open one;
- edit an open file with an incremental change (insert a line, delete an inserted one, change a number),
  sometimes followed by a save;
- codeLens and codeAction requests on open files, at random lines (the latencies recorded). The server
  provides no hover, so none is measured.

Every ``--sample`` seconds: the server's RSS. At the end: every file closed, then RSS again (memory handed
back), and whether the server is still alive and answering.

    nice -n 10 .venv/bin/python benchmarks/lsp_soak.py --minutes 30 [--out benchmarks/results/lsp_soak_cpu2.json]

``--big-mb 5`` measures one large document instead (the issue's 19.5 s / 1.64 GB case): a small document's
code lens while the large one is open, the server's peak RSS, and RSS after closing it — once with the
default size limit (the large file gets a notice) and once with the limit raised so that it is analyzed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient
from pytest_lsp import client_capabilities

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = json.loads((ROOT / "extension" / "src" / "launch.json").read_text())
MAX_OPEN = 20


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def idle(pid: int, quiet: float = 3.0, limit: float = 1200.0) -> float:
    """Wait until the server used no CPU for ``quiet`` seconds (work for closed documents has finished);
    returns the seconds waited."""
    t0 = time.monotonic()
    last = cpu_s(pid)
    still = time.monotonic()
    while time.monotonic() - t0 < limit:
        await asyncio.sleep(0.5)
        now = cpu_s(pid)
        if now - last > 0.05:
            last, still = now, time.monotonic()
        elif time.monotonic() - still >= quiet:
            break
    return time.monotonic() - t0


def variants(n: int, rng: random.Random) -> dict[str, str]:
    """``n`` CUDA files made from kernels/: renamed kernels, other block sizes, helpers and comments."""
    bases = [(p.stem, p.read_text()) for p in sorted((ROOT / "kernels").glob("*.cu"))]
    out: dict[str, str] = {}
    for i in range(n):
        stem, text = bases[i % len(bases)]
        names = re.findall(r"__global__\s+(?:__launch_bounds__\([^)]*\)\s*)?void\s+(\w+)", text)
        for name in names:
            text = re.sub(rf"\b{name}\b", f"{name}_v{i}", text)
        text = re.sub(r"\b(128|256|512)\b", lambda _: str(rng.choice((64, 128, 256, 512))), text)
        factor = f"{rng.uniform(0.5, 2):.3f}f"
        helper = (f"\n__device__ __forceinline__ float scale_v{i}(float v) {{ return v * {factor}; }}\n"
                  if rng.random() < 0.5 else "")
        out[f"{stem}_v{i:02d}.cu"] = f"// soak variant {i} of {stem}.cu\n{helper}{text}"
    return out


class Doc:
    def __init__(self, uri: str, text: str) -> None:
        self.uri = uri
        self.text = text
        self.version = 1
        self.inserted: list[int] = []  # lines this soak inserted (candidates for deletion)


def lines_of(text: str) -> list[str]:
    return text.splitlines(keepends=True)


class Soak:
    def __init__(self, client: LanguageClient, files: dict[str, str], work: Path, rng: random.Random) -> None:
        self.client = client
        self.files = files
        self.work = work
        self.rng = rng
        self.open: dict[str, Doc] = {}
        self.ops: dict[str, int] = {}
        self.latency: dict[str, list[tuple[float, float]]] = {"codeLens": [], "codeAction": []}
        self.errors: list[str] = []
        self.edit_n = 0
        self.t_start = time.monotonic()

    def count(self, op: str) -> None:
        self.ops[op] = self.ops.get(op, 0) + 1

    def do_open(self) -> None:
        closed = [f for f in self.files if (self.work / f).as_uri() not in self.open]
        if not closed:
            return
        name = self.rng.choice(closed)
        path = self.work / name
        text = path.read_text()
        doc = Doc(path.as_uri(), text)
        self.open[doc.uri] = doc
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(doc.uri, "cuda-cpp", doc.version, text)))
        self.count("open")

    def do_close(self) -> None:
        doc = self.open.pop(self.rng.choice(list(self.open)))
        self.client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(doc.uri)))
        self.count("close")

    def do_edit(self) -> None:
        doc = self.open[self.rng.choice(list(self.open))]
        ls = lines_of(doc.text)
        kind = self.rng.random()
        if kind < 0.2 and doc.inserted:
            line = doc.inserted.pop(self.rng.randrange(len(doc.inserted)))
            rng_ = lsp.Range(lsp.Position(line, 0), lsp.Position(line + 1, 0))
            new = ""
            ls[line : line + 1] = []
            doc.inserted = [x - 1 if x > line else x for x in doc.inserted]
        elif kind < 0.5:
            nums = [(i, m) for i, t in enumerate(ls) if not t.lstrip().startswith("#")
                    for m in re.finditer(r"\b\d+\b", t)]
            if not nums:
                return
            i, m = self.rng.choice(nums)
            value = str(self.rng.choice((1, 2, 4, 8, 16, 32, 64, 128, 256)))
            rng_ = lsp.Range(lsp.Position(i, m.start()), lsp.Position(i, m.end()))
            new = value
            ls[i] = ls[i][: m.start()] + value + ls[i][m.end() :]
        else:
            line = self.rng.randrange(len(ls) + 1)
            self.edit_n += 1
            new = f"    // soak edit {self.edit_n}\n"
            rng_ = lsp.Range(lsp.Position(line, 0), lsp.Position(line, 0))
            ls[line:line] = [new]
            doc.inserted = [x + 1 if x >= line else x for x in doc.inserted] + [line]
        doc.text = "".join(ls)
        doc.version += 1
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(version=doc.version, uri=doc.uri),
            [lsp.TextDocumentContentChangePartial(range=rng_, text=new)]))
        self.count("edit")
        if self.rng.random() < 0.3:
            self.client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(doc.uri)))
            self.count("save")

    async def timed(self, kind: str, coro: Any) -> None:
        t0 = time.perf_counter()
        try:
            await asyncio.wait_for(coro, 60)
        except Exception as e:
            self.errors.append(f"{kind}: {type(e).__name__}: {e}"[:300])
            return
        self.latency[kind].append((time.monotonic() - self.t_start, (time.perf_counter() - t0) * 1e3))
        self.count(kind)

    async def do_request(self) -> None:
        doc = self.open[self.rng.choice(list(self.open))]
        line = self.rng.randrange(max(1, doc.text.count("\n")))
        if self.rng.random() < 0.5:
            await self.timed("codeLens", self.client.text_document_code_lens_async(
                lsp.CodeLensParams(lsp.TextDocumentIdentifier(doc.uri))))
        else:
            await self.timed("codeAction", self.client.text_document_code_action_async(lsp.CodeActionParams(
                lsp.TextDocumentIdentifier(doc.uri), lsp.Range(lsp.Position(line, 2), lsp.Position(line, 2)),
                lsp.CodeActionContext(diagnostics=[]))))

    async def step(self) -> None:
        r = self.rng.random()
        if not self.open or (r < 0.10 and len(self.open) < MAX_OPEN):
            self.do_open()
        elif r < 0.17:
            self.do_close()
        elif r < 0.60:
            self.do_edit()
        else:
            await self.do_request()


def percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    v = sorted(values)
    return {"n": len(v), "p50": round(v[len(v) // 2], 2), "p95": round(v[min(len(v) - 1, int(0.95 * len(v)))], 2),
            "max": round(v[-1], 2)}


async def start_server(cwd: Path, root: Path, env: dict[str, str], log: Path,
                       options: dict[str, Any]) -> tuple[LanguageClient, Any, asyncio.Task[None]]:
    """The server started as the extension starts it, initialized; its stderr drained into ``log``."""
    client = LanguageClient("warpforge-soak", "1")
    pubs = {"count": 0}
    client.pubs = pubs  # type: ignore[attr-defined]
    client.published = {}  # type: ignore[attr-defined]

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_pub(params: lsp.PublishDiagnosticsParams) -> None:
        pubs["count"] += 1
        client.published[params.uri] = params.diagnostics  # type: ignore[attr-defined]

    @client.feature(lsp.WINDOW_SHOW_MESSAGE)
    def on_message(params: lsp.ShowMessageParams) -> None:
        pass

    @client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
    def on_refresh(params: None) -> None:
        return None

    converter = client.protocol._converter

    def structure(obj: Any, _: Any) -> Any:  # lsprotocol 2025.0.0: a CodeAction with a command decodes as Command
        return converter.structure(obj, lsp.Command if isinstance(obj.get("command"), str) else lsp.CodeAction)

    converter.register_structure_hook(lsp.Command | lsp.CodeAction, structure)  # type: ignore[arg-type]
    await client.start_io(sys.executable, *LAUNCH["pythonFlags"], *LAUNCH["serverArgs"], env=env, cwd=cwd)
    proc = client._server  # type: ignore[attr-defined]

    async def drain() -> None:  # the server logs to stderr: an unread pipe would block it
        with log.open("wb") as f:
            while chunk := await proc.stderr.read(65536):
                f.write(chunk)

    drainer = asyncio.create_task(drain())
    await client.initialize_async(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=root.as_uri(), initialization_options=options))
    client.initialized(lsp.InitializedParams())
    return client, proc, drainer


async def stop_server(client: LanguageClient, proc: Any, drainer: asyncio.Task[None]) -> bool:
    answered = False
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.shutdown_async(None), 30)
        answered = True
    client.exit(None)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 30)
    drainer.cancel()
    await client.stop()
    return answered


def big_source(size: int) -> str:
    """The reference kernels again and again, each copy in its own namespace, to about ``size`` bytes."""
    body = "\n".join(line for p in sorted((ROOT / "kernels").glob("*.cu")) for line in p.read_text().splitlines()
                     if not line.startswith("#include"))
    parts = ["#include <cuda_runtime.h>\n"]
    total = 0
    while total < size:
        parts.append(f"namespace copy{len(parts)} {{\n{body}\n}}\n")
        total += len(parts[-1])
    return "".join(parts)


async def big_document(mb: float, out: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="wf-lsp-big-"))
    (work / "ws").mkdir()
    (work / "storage").mkdir()
    env = dict(os.environ)
    env.update(LAUNCH["env"])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env["WARPFORGE_CACHE"] = str(work / "cache")
    big_text = big_source(int(mb * 1e6))
    small_text = (ROOT / "kernels" / "saxpy.cu").read_text()
    results: dict[str, Any] = {"document_mb": round(len(big_text.encode()) / 1e6, 2),
                               "machine": f"{platform.machine()}, {os.cpu_count()} cores shared, no GPU"}
    for label, limit in (("default_limit", None), ("limit_raised_analyzed", 50_000_000)):
        options: dict[str, Any] = {"trusted": True, "nvccPath": "/nonexistent/nvcc"}  # source-pattern phase only
        if limit is not None:
            options["maxDocumentSize"] = limit
        client, proc, drainer = await start_server(work / "storage", work / "ws", env, work / f"{label}.log",
                                                   {"warpforge": options})
        pid = proc.pid
        peak = rss_mb(pid)
        big = (work / "ws" / "big.cu").as_uri()
        small = (work / "ws" / "small.cu").as_uri()
        t0 = time.monotonic()
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(big, "cuda-cpp", 1, big_text)))
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(small, "cuda-cpp", 1, small_text)))
        t1 = time.perf_counter()
        await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(small)))
        small_lens_ms = (time.perf_counter() - t1) * 1e3
        published = client.published  # type: ignore[attr-defined]
        while big not in published and time.monotonic() - t0 < 600:
            peak = max(peak, rss_mb(pid))
            await asyncio.sleep(0.1)
        big_diag_s = time.monotonic() - t0
        peak = max(peak, rss_mb(pid))
        notice = [d.message for d in published.get(big, [])][:1]
        client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(big)))
        await asyncio.sleep(5)
        after = rss_mb(pid)
        waited = await idle(pid)  # a running analysis of the closed file cannot be interrupted: let it end
        after_idle = rss_mb(pid)
        await stop_server(client, proc, drainer)
        results[label] = {"small_doc_code_lens_ms": round(small_lens_ms, 1),
                          "big_doc_first_diagnostics_s": round(big_diag_s, 2), "peak_rss_mb": round(peak, 1),
                          "rss_after_close_mb": round(after, 1), "rss_after_close_and_idle_mb": round(after_idle, 1),
                          "idle_after_close_s": round(waited, 1), "big_doc_notice": notice}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return results


async def run(minutes: float, sample: float, seed: int, out: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="wf-lsp-soak-"))
    files_dir = work / "workspace"
    files_dir.mkdir()
    files = variants(50, rng)
    for name, text in files.items():
        (files_dir / name).write_text(text)
    neutral = work / "storage"  # the extension's storage folder stands in: not the workspace
    neutral.mkdir()
    env = dict(os.environ)
    env.update(LAUNCH["env"])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "server"), env.get("PYTHONPATH", "")])
    env["WARPFORGE_CACHE"] = str(work / "cache")
    env.pop("ANTHROPIC_API_KEY", None)

    client, proc, drainer = await start_server(neutral, files_dir, env, work / "server.log",
                                               {"warpforge": {"trusted": True}})
    pubs = client.pubs  # type: ignore[attr-defined]
    pid = proc.pid
    soak = Soak(client, files, files_dir, rng)
    t_start = time.monotonic()
    soak.t_start = t_start
    deadline = t_start + minutes * 60
    timeline: list[dict[str, float]] = [{"t_s": 0.0, "rss_mb": round(rss_mb(pid), 1), "open": 0}]
    next_sample = t_start + sample
    cpu0 = os.times()
    while time.monotonic() < deadline and proc.returncode is None:
        await soak.step()
        await asyncio.sleep(rng.uniform(0.02, 0.25))
        if time.monotonic() >= next_sample:
            timeline.append({"t_s": round(time.monotonic() - t_start, 1), "rss_mb": round(rss_mb(pid), 1),
                             "open": len(soak.open), "load1": round(os.getloadavg()[0], 2)})
            next_sample += sample
    alive_during = proc.returncode is None
    # Close everything, let the server settle, measure what it gives back.
    for uri in list(soak.open):
        soak.open.pop(uri)
        client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
    await asyncio.sleep(10)
    rss_closed = rss_mb(pid) if proc.returncode is None else float("nan")
    answered = await stop_server(client, proc, drainer)
    wall = time.monotonic() - t_start
    rss = [s["rss_mb"] for s in timeline]
    loads = [s["load1"] for s in timeline[1:]] or [round(os.getloadavg()[0], 2)]
    windows: list[dict[str, Any]] = []
    span = max(60.0, minutes * 60 / 6)
    for w in range(int(minutes * 60 // span) + 1):
        lo, hi = w * span, (w + 1) * span
        vals = [ms for kind in soak.latency.values() for t, ms in kind if lo <= t < hi]
        if vals:
            windows.append({"from_s": round(lo), "to_s": round(hi), **percentiles(vals)})
    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs, no GPU; nvcc "
                   f"{'present' if shutil.which('nvcc') else 'absent'}; run under nice -n 10",
        "python": sys.version.split()[0], "minutes": minutes, "seed": seed, "files": len(files),
        "max_open": MAX_OPEN, "ops": soak.ops, "publishes": pubs["count"], "errors": soak.errors[:20],
        "error_count": len(soak.errors),
        "latency_ms": {kind: percentiles([ms for _, ms in v]) for kind, v in soak.latency.items()},
        "latency_ms_by_window": windows,
        "rss_mb": {"start": rss[0], "max": max(rss), "end_with_files_open": rss[-1], "after_closing_all": round(
            rss_closed, 1), "samples": timeline},
        "server_alive_throughout": alive_during, "server_answered_shutdown": answered,
        "server_exit_status": proc.returncode, "wall_s": round(wall, 1),
        "client_cpu_s": round(sum(os.times()[:2]) - sum(cpu0[:2]), 1),
        "machine_load1": {"min": min(loads), "max": max(loads), "mean": round(sum(loads) / len(loads), 2)},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="how long to soak (default 30)")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between RSS samples (default 10)")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--big-mb", type=float, default=0.0,
                    help="measure one document of this many MB instead of soaking (see above)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lsp_soak.json"))
    args = ap.parse_args()
    if args.minutes <= 0 or args.sample <= 0 or args.big_mb < 0:
        ap.error("--minutes and --sample must be positive, --big-mb not negative")
    if args.big_mb:
        print(json.dumps(asyncio.run(big_document(args.big_mb, Path(args.out))), indent=2))
        return
    res = asyncio.run(run(args.minutes, args.sample, args.seed, Path(args.out)))
    summary = {k: v for k, v in res.items() if k not in ("rss_mb", "latency_ms_by_window")}
    summary["rss_mb"] = {k: v for k, v in res["rss_mb"].items() if k != "samples"}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
