"""CodeLens above each ``__global__``: Optimize · Add spec; after a run, "1.42× faster variant ready — View".

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


def kernel_rows(text: str) -> list[KernelRow]:
    """Each kernel's name, the line of its name and whether it has a spec (the part that parses)."""
    src = SourceText(text)
    model = parse(src.data)
    return [KernelRow(k.name, range_(src.range(k.name_span)).start.line, has_annotation(src, k)) for k in model.kernels]


def assemble(server: WarpForgeServer, uri: str, rows: list[KernelRow]) -> list[lsp.CodeLens]:
    ready = server.jobs.ready(uri)
    out: list[lsp.CodeLens] = []
    for k in rows:
        line = lsp.Range(lsp.Position(k.line, 0), lsp.Position(k.line, 0))
        running = server.jobs.running_for(uri, k.name)
        if running is not None:
            out.append(lsp.CodeLens(line, lsp.Command("$(sync~spin) Optimizing… (cancel)", "warpforge.cancel",
                                                      arguments=[running.id])))
        else:
            out.append(lsp.CodeLens(line, lsp.Command("Optimize", "warpforge.optimize",
                                                      arguments=[uri, k.name, ""])))
        profiling = server.profiles.running_for(uri, k.name)
        out.append(lsp.CodeLens(line, lsp.Command(
            "Profiling… (cancel)" if profiling else "Profile", "warpforge.cancel" if profiling else "warpforge.profile",
            arguments=[profiling.id] if profiling else [uri, k.name])))
        spec_title = "Edit benchmark spec" if k.annotated else "Add benchmark spec"
        out.append(lsp.CodeLens(line, lsp.Command(spec_title, "warpforge.addSpec", arguments=[uri, k.name])))
        if k.name in ready:
            job, node = ready[k.name]
            out.append(lsp.CodeLens(line, lsp.Command(
                f"{node.speedup:.2f}× faster variant ready — View", "warpforge.showCandidate",
                arguments=[job.id, node.candidate.hash])))
    return out


async def lenses(server: WarpForgeServer, uri: str) -> list[lsp.CodeLens]:
    text = server.workspace.get_text_document(uri).source
    if limits.skip_reason(text, server.settings.max_document_bytes) is not None:
        return []
    rows = await server.off_loop(lambda: kernel_rows(text))
    return assemble(server, uri, rows)


def register(server: WarpForgeServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(ls: WarpForgeServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
        return await lenses(ls, params.text_document.uri)
