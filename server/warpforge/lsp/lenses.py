"""CodeLens above each ``__global__``: Optimize · Profile · Add spec; after a run, its result until the user acts.

The result stays where the kernel is, not only in a toast that fades: "1.42× faster — Review" while a verified
variant waits (after a Reject, "next best 1.20× faster — Review", the same variant the status bar offers),
"no faster variant (12 tried) — Show Search" or "optimization failed — Show Search" after a job without one,
until the kernel is edited, a variant is accepted or a new job starts. ``warpforge.codeLens.enabled`` off
(``Settings.code_lens_enabled``): no lenses at all.

The parse runs in the interactive thread pool (a large file must not hold up other requests); the lenses are put
together on the event loop, where the job state lives. A document the server does not analyze (too
large, not text: see ``limits``) has no lenses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..spec.annotations import has_annotation
from . import limits
from .convert import range_

if TYPE_CHECKING:
    from .server import WarpForgeServer


@dataclass(frozen=True)
class KernelRow:
    name: str
    line: int
    annotated: bool
    #: the kernel's definition as written now (a job's result describes this text only)
    text: str = ""


def kernel_rows(text: str) -> list[KernelRow]:
    """Each kernel's name, the line of its name, whether it has a spec and its text (the part that parses)."""
    src = SourceText(text)
    model = parse(src.data)
    return [KernelRow(k.name, range_(src.range(k.name_span)).start.line, has_annotation(src, k), src.slice(k.span))
            for k in model.kernels]


def result_lens(server: WarpForgeServer, uri: str, k: KernelRow, line: lsp.Range) -> lsp.CodeLens | None:
    """The last job's result when no variant waits: said until the kernel changes or another job starts."""
    if not server.jobs_started:
        return None
    job = server.jobs.last_result(uri, k.name)
    if job is None or job.id in server.jobs.accepted or (k.text and k.text != job.prepared.kernel_text):
        return None
    outcome = job.work.outcome
    if job.state == "failed":
        title = "optimization failed — Show Search"
    elif outcome is not None and outcome.result.improved:
        return None  # its variants were all rejected: nothing left to offer (the status bar agrees)
    elif outcome is not None:
        title = f"no faster variant ({outcome.result.evaluations} tried) — Show Search"
    else:
        title = f"optimization {job.state} — Show Search"
    return lsp.CodeLens(line, lsp.Command(title, "warpforge.showSearch", arguments=[job.id]))


def assemble(server: WarpForgeServer, uri: str, rows: list[KernelRow]) -> list[lsp.CodeLens]:
    if not server.settings.code_lens_enabled:
        return []
    # before the first job the job managers do not exist (nor their modules): nothing runs, nothing waits
    started = server.jobs_started
    ready = server.jobs.ready(uri) if started else {}
    out: list[lsp.CodeLens] = []
    for k in rows:
        line = lsp.Range(lsp.Position(k.line, 0), lsp.Position(k.line, 0))
        running = server.jobs.running_for(uri, k.name) if started else None
        if running is not None:
            out.append(lsp.CodeLens(line, lsp.Command("$(sync~spin) Optimizing… (cancel)", "warpforge.cancel",
                                                      arguments=[running.id])))
        else:
            out.append(lsp.CodeLens(line, lsp.Command("Optimize", "warpforge.optimize",
                                                      arguments=[uri, k.name, ""])))
        profiling = server.profiles.running_for(uri, k.name) if started else None
        out.append(lsp.CodeLens(line, lsp.Command(
            "Profiling… (cancel)" if profiling else "Profile", "warpforge.cancel" if profiling else "warpforge.profile",
            arguments=[profiling.id] if profiling else [uri, k.name])))
        spec_title = "Edit benchmark spec" if k.annotated else "Add benchmark spec"
        out.append(lsp.CodeLens(line, lsp.Command(spec_title, "warpforge.addSpec", arguments=[uri, k.name])))
        waiting = ready.get(k.name)
        if waiting is not None and k.text and k.text != waiting[0].prepared.kernel_text:
            waiting = None  # edited since the job started: its variant describes the old text (accept refuses it)
        if waiting is not None:
            job, node = waiting
            # "next best" once what the job found best was rejected (ties in speed are not a rejection of it)
            outcome = job.work.outcome
            if outcome is not None and outcome.result.improved:
                which = "next best " if node is not outcome.result.best else ""
            else:
                which = "next best " if server.jobs.rejected.get(job.id, 0.0) >= (node.speedup or 0.0) else ""
            out.append(lsp.CodeLens(line, lsp.Command(
                f"{which}{node.speedup:.2f}× faster — Review", "warpforge.showCandidate",
                arguments=[job.id, node.candidate.hash])))
        elif running is None and (result := result_lens(server, uri, k, line)) is not None:
            out.append(result)
    return out


async def lenses(server: WarpForgeServer, uri: str) -> list[lsp.CodeLens]:
    if not server.settings.code_lens_enabled:
        return []
    if uri not in server.workspace.text_documents:
        return []  # not open: pygls would read the path from disk (a FileNotFoundError for a bad URI)
    text = server.workspace.get_text_document(uri).source
    if limits.skip_reason(text, server.settings.max_document_bytes) is not None:
        return []
    rows = await server.off_loop(lambda: kernel_rows(text))
    return assemble(server, uri, rows)


def register(server: WarpForgeServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(ls: WarpForgeServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
        return await lenses(ls, params.text_document.uri)
