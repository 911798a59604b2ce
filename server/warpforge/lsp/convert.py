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


#: an opportunity's estimated gain from which it is shown as a warning / as information; below the second, a hint
WARN_GAIN = 1.5
INFO_GAIN = 1.15


def ranked_severity(f: Finding) -> Severity:
    """The severity the editor shows: hazards (errors, warnings) as catalogued; an opportunity with an estimated
    gain ranked by it, so the squiggle that costs most stands out (>= 1.5x: warning, >= 1.15x: information,
    less: hint); an opportunity without an estimate keeps its catalogue severity."""
    if f.gain is None or f.severity in (Severity.ERROR, Severity.WARNING):
        return f.severity
    if f.gain >= WARN_GAIN:
        return Severity.WARNING
    return Severity.INFO if f.gain >= INFO_GAIN else Severity.HINT


def diagnostic(f: Finding, uri: str) -> lsp.Diagnostic:
    """The finding as a diagnostic, worded as clangd words one: a headline of at most a dozen words
    (``Finding.headline``; compiler and spec messages whole) and the estimated gain; the explanation, the
    evidence table, the action and the related lines are in the Markdown hover (``hover``), the evidence and
    the full message in ``data``."""
    message = f.headline()
    if f.gain is not None:
        message += f"\nestimated gain {f.gain:.2f}×"
    return lsp.Diagnostic(
        range=range_(f.range),
        message=message,
        severity=_SEVERITY[ranked_severity(f)],
        code=f.code,
        code_description=lsp.CodeDescription(href=doc_url(f.code)),
        source="warpforge",
        related_information=[
            lsp.DiagnosticRelatedInformation(lsp.Location(uri, range_(r)), m) for r, m in f.related
        ] or None,
        data={"action": f.action, "kernel": f.kernel, "evidence": f.evidence, "gain": f.gain, "source": f.source,
              "message": f.message},
    )
