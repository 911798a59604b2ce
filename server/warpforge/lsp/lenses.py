"""CodeLens above each ``__global__``: Optimize · Add spec; after a run, "1.42× faster variant ready — View"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from ..cuda.parser import parse
from ..cuda.text import SourceText
from ..spec.annotations import has_annotation
from .convert import range_

if TYPE_CHECKING:
    from .server import WarpForgeServer


def lenses(server: WarpForgeServer, uri: str) -> list[lsp.CodeLens]:
    doc = server.workspace.get_text_document(uri)
    src = SourceText(doc.source)
    model = parse(src.data)
    ready = server.jobs.ready(uri)
    out: list[lsp.CodeLens] = []
    for k in model.kernels:
        rng = range_(src.range(k.name_span))
        line = lsp.Range(lsp.Position(rng.start.line, 0), lsp.Position(rng.start.line, 0))
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
        annotated = has_annotation(src, k)
        out.append(lsp.CodeLens(line, lsp.Command("Edit spec" if annotated else "Add spec", "warpforge.addSpec",
                                                  arguments=[uri, k.name])))
        if k.name in ready:
            job, node = ready[k.name]
            out.append(lsp.CodeLens(line, lsp.Command(
                f"{node.speedup:.2f}× faster variant ready — View", "warpforge.showCandidate",
                arguments=[job.id, node.candidate.hash])))
    return out


def register(server: WarpForgeServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: WarpForgeServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
        return lenses(ls, params.text_document.uri)
