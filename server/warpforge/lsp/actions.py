"""Code actions at a position inside a kernel: Optimize (beam / MCTS), Add or complete spec, quick fixes.

Quick fixes are attached to findings whose transformation applies directly as a source edit (WF101 →
``const __restrict__``, WF010 → ``__launch_bounds__``); each carries its edit so the editor can preview it.
A header nvcc did not find (WF000 with ``missing_header``) gets fixes that write ``warpforge.toml``: use a
``compile_commands.json`` found under the workspace, or the workspace folder that holds the header.
Actions are computed from a snapshot of the document in the thread pool (parsing and guessing a spec
take long on a big file); a document the server does not analyze (see ``limits``) has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.uris import from_fs_path

from ..compiler.fixes import ConfigFix, missing_header_fixes
from ..cuda.access import param_access
from ..cuda.model import FileModel, Kernel
from ..cuda.parser import parse
from ..cuda.rewrite import TextEdit, add_const, add_restrict, make_edit, set_launch_bounds
from ..cuda.text import Position, SourceText, Span
from ..spec.annotations import annotation_edits, has_annotation
from ..spec.elsewhere import find_host
from ..spec.model import SpecError
from ..spec.resolve import Draft, draft_spec
from . import limits
from .convert import text_edit
from .protocol import CMD_SPEC_NOTICE

if TYPE_CHECKING:
    from .server import WarpForgeServer


def kernel_at(src: SourceText, model: FileModel, pos: lsp.Position) -> Kernel | None:
    off = src.offset(Position(pos.line, pos.character))
    best: Kernel | None = None
    for k in model.kernels:
        start = k.comment_span.start if k.comment_span is not None else k.span.start
        if start <= off <= k.span.end and (best is None or k.span.start > best.span.start):
            best = k
    return best


def spec_draft(src: SourceText, kernel: Kernel, file: str, model: FileModel, root: Path | None = None,
               overlay: Mapping[Path, str] | None = None) -> Draft:
    """The spec to write above ``kernel``: inferred from its file, else from the launch in another file of
    the workspace folder ``root`` (``spec.elsewhere``; ``overlay`` holds the editor's unsaved texts), with
    its guessed lines marked."""
    host = None
    searched = False
    if root is not None and not model.readable_launches_of(kernel.name):
        host = find_host(file, kernel.name, root, overlay)
        searched = True
    return draft_spec(src, model, kernel, file, host, searched)


def spec_edits(src: SourceText, kernel: Kernel, file: str, model: FileModel, root: Path | None = None,
               overlay: Mapping[Path, str] | None = None) -> list[TextEdit]:
    """Replace the kernel's @warpforge lines with a complete, filled-in block."""
    return annotation_edits(src, kernel, spec_draft(src, kernel, file, model, root, overlay).annotation())


#: a server command that shows its argument as a notice (run after the "Add benchmark spec" edit is applied)
NOTICE_COMMAND = CMD_SPEC_NOTICE


def _workspace_edit(uri: str, version: int | None, edits: list[TextEdit]) -> lsp.WorkspaceEdit:
    return lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(
        text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
        edits=[text_edit(e) for e in edits])])


def _config_action(fix: ConfigFix, d: lsp.Diagnostic) -> lsp.CodeAction:
    """A quick fix that creates or rewrites ``warpforge.toml`` (the whole file: it is small)."""
    uri = from_fs_path(str(fix.path)) or fix.path.as_uri()
    changes: list[lsp.TextDocumentEdit | lsp.CreateFile | lsp.RenameFile | lsp.DeleteFile] = []
    if fix.create:
        changes.append(lsp.CreateFile(uri=uri, options=lsp.CreateFileOptions(ignore_if_exists=True)))
        end = lsp.Position(0, 0)
    else:
        end = lsp.Position(len(fix.path.read_text(encoding="utf-8").splitlines()) + 1, 0)
    changes.append(lsp.TextDocumentEdit(
        text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=None),
        edits=[lsp.TextEdit(range=lsp.Range(lsp.Position(0, 0), end), new_text=fix.text)]))
    return lsp.CodeAction(title=fix.title, kind=lsp.CodeActionKind.QuickFix, diagnostics=[d],
                          edit=lsp.WorkspaceEdit(document_changes=changes))


def _header_fixes(path: str, root: Path | None, diagnostics: list[lsp.Diagnostic]) -> list[lsp.CodeAction]:
    """For a header nvcc did not find: use a compilation database found under the workspace, or name the
    workspace folder that holds the header, in ``warpforge.toml`` (see ``compiler.fixes``)."""
    out: list[lsp.CodeAction] = []
    file = Path(path)
    if root is None or not file.is_file():
        return out
    for d in diagnostics:
        data: dict[str, Any] = d.data if isinstance(d.data, dict) else {}
        header = (data.get("evidence") or {}).get("missing_header")
        if d.code != "WF000" or not isinstance(header, str) or not header:
            continue
        fixes = missing_header_fixes(file, header, root)
        out.extend(_config_action(f, d) for f in fixes)
        if out:
            out[0].is_preferred = True
    return out


def _quick_fixes(uri: str, version: int | None, src: SourceText, model: FileModel,
                 diagnostics: list[lsp.Diagnostic]) -> list[lsp.CodeAction]:
    out: list[lsp.CodeAction] = []
    for d in diagnostics:
        data: dict[str, Any] = d.data if isinstance(d.data, dict) else {}
        kname = data.get("kernel")
        k = model.kernel(kname) if isinstance(kname, str) else None
        if k is None:
            continue
        edits: list[TextEdit] = []
        title = ""
        if d.code == "WF101":
            access = param_access(src, k)
            names = [p.name for p in k.params if p.is_pointer and p.pointer_depth == 1
                     and (a := access.get(p.name)) is not None and not a.write and not a.escapes
                     and not (p.is_const and p.is_restrict)]
            missing: set[str] = set()
            for name in names:
                for qual, e in (("const", add_const(src, k, name)), ("__restrict__", add_restrict(src, k, name))):
                    if e is not None:
                        edits.append(e)
                        missing.add(qual)
            what = " ".join(q for q in ("const", "__restrict__") if q in missing)
            title = f"Mark {', '.join(names)} {what}"
        elif d.code == "WF003" and isinstance(fix := (data.get("evidence") or {}).get("spec_fix"), dict):
            # a spec problem's own fix: the line as it should read, or a line to add (spec.problems)
            line = fix.get("line")
            new = fix.get("text")
            if isinstance(line, int) and isinstance(new, str) and 1 <= line <= src.line_count:
                start = src.line_starts[line - 1]
                if fix.get("kind") == "replace":
                    end = start + len(src.line_text(line - 1).encode("utf-8"))
                    edits.append(make_edit(src, Span(start, end), new))
                else:
                    edits.append(make_edit(src, Span(start, start), new + "\n"))
                title = str(fix.get("title") or "Fix the spec line")
        elif d.code == "WF010":
            block = (data.get("evidence") or {}).get("block_threads")
            if isinstance(block, int) and block > 0:
                edits.append(set_launch_bounds(src, k, block))
                title = f"Add __launch_bounds__({block})"
        if edits:
            out.append(lsp.CodeAction(title=title, kind=lsp.CodeActionKind.QuickFix, diagnostics=[d],
                                      is_preferred=True, edit=_workspace_edit(uri, version, edits)))
    return out


def actions(uri: str, version: int | None, path: str, text: str,
            params: lsp.CodeActionParams, root: Path | None = None,
            overlay: Mapping[Path, str] | None = None) -> list[lsp.CodeAction]:
    """The actions at ``params.range`` for a snapshot of the document (runs in the thread pool); ``root`` is
    the workspace folder searched for a missing header's fixes and for the kernel's launches in other files
    (``overlay``: the open documents' texts)."""
    src = SourceText(text)
    model = parse(src.data)
    k = kernel_at(src, model, params.range.start)
    out = _header_fixes(path, root, list(params.context.diagnostics))
    out += _quick_fixes(uri, version, src, model, list(params.context.diagnostics))
    if k is None:
        return out
    # The strategy setting chooses the search; the second entry explores more (MCTS keeps revisiting
    # branches a beam drops). Users see what happens, not the names of search algorithms.
    for strategy, label in (("", ""), ("mcts", " (explore more)")):
        out.append(lsp.CodeAction(title=f"WarpForge: Optimize kernel `{k.name}`{label}",
                                  kind=lsp.CodeActionKind.Refactor,
                                  command=lsp.Command(f"Optimize {k.name}", "warpforge.optimize",
                                                      arguments=[uri, k.name, strategy])))
    out.append(lsp.CodeAction(title=f"WarpForge: Profile `{k.name}` (Nsight Compute)",
                              kind=lsp.CodeActionKind.Refactor,
                              command=lsp.Command(f"Profile {k.name}", "warpforge.profile", arguments=[uri, k.name])))
    annotated = has_annotation(src, k)
    title = f"WarpForge: {'Edit' if annotated else 'Add'} benchmark spec for `{k.name}`"
    try:
        draft = spec_draft(src, k, path, model, root, overlay)
        edits = annotation_edits(src, k, draft.annotation())
    except SpecError as e:
        # A spec the user is still typing (or got wrong) must not take the other actions down with it: the
        # spec action is shown disabled with the error (the hint at the line says it too).
        out.append(lsp.CodeAction(title=title, kind=lsp.CodeActionKind.Refactor,
                                  disabled=lsp.CodeActionDisabled(reason=str(e))))
        return out
    if not edits:
        out.append(lsp.CodeAction(title=title, kind=lsp.CodeActionKind.Refactor, disabled=lsp.CodeActionDisabled(
            reason=f"the benchmark spec of `{k.name}` is complete: nothing to add")))
        return out
    notice = draft.notice()
    # the edit is applied first, then the command tells which values came from another file or are guesses
    out.append(lsp.CodeAction(title=title, kind=lsp.CodeActionKind.Refactor,
                              edit=_workspace_edit(uri, version, edits),
                              command=lsp.Command("Benchmark spec notice", NOTICE_COMMAND,
                                                  arguments=[f"`{k.name}`: {notice}"]) if notice else None))
    return out


def register(server: WarpForgeServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(
        code_action_kinds=[lsp.CodeActionKind.QuickFix, lsp.CodeActionKind.Refactor]))
    async def code_action(ls: WarpForgeServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        uri = params.text_document.uri
        if uri not in ls.workspace.text_documents:
            return []  # not open: nothing to act on (pygls would read the path from disk)
        doc = ls.workspace.get_text_document(uri)
        text = doc.source
        if limits.skip_reason(text, ls.settings.max_document_bytes) is not None:
            return []
        version, path = doc.version, doc.path or uri
        root = ls.workspace_root(doc.path)
        overlay = {Path(d.path): d.source for u, d in ls.workspace.text_documents.items() if d.path and u != uri}
        return await ls.off_loop(lambda: actions(uri, version, path, text, params, root, overlay))
