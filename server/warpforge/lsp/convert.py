"""Pipeline types → lsprotocol types. The only place that knows both."""

from __future__ import annotations

from lsprotocol import types as lsp

from ..cuda.rewrite import TextEdit
from ..cuda.text import Range
from ..profile.findings import Finding, Severity, doc_url

_SEVERITY = {
    Severity.ERROR: lsp.DiagnosticSeverity.Error,
    Severity.WARNING: lsp.DiagnosticSeverity.Warning,
    Severity.INFO: lsp.DiagnosticSeverity.Information,
    Severity.HINT: lsp.DiagnosticSeverity.Hint,
}


def range_(r: Range) -> lsp.Range:
    return lsp.Range(lsp.Position(r.start.line, r.start.character), lsp.Position(r.end.line, r.end.character))


def text_edit(e: TextEdit) -> lsp.TextEdit:
    return lsp.TextEdit(range=range_(e.range), new_text=e.new_text)


def diagnostic(f: Finding, uri: str) -> lsp.Diagnostic:
    evidence = f.evidence_text()
    message = f.message + (f"\nevidence: {evidence}" if evidence else "")
    if f.gain is not None:
        message += f"\nestimated gain: {f.gain:.2f}x" + (f" ({f.gain_basis})" if f.gain_basis else "")
    return lsp.Diagnostic(
        range=range_(f.range),
        message=message,
        severity=_SEVERITY[f.severity],
        code=f.code,
        code_description=lsp.CodeDescription(href=doc_url(f.code)),
        source="warpforge",
        related_information=[
            lsp.DiagnosticRelatedInformation(lsp.Location(uri, range_(r)), m) for r, m in f.related
        ] or None,
        data={"action": f.action, "kernel": f.kernel, "evidence": f.evidence, "gain": f.gain, "source": f.source},
    )
