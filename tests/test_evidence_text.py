"""Evidence as people read it in hovers and `warpforge hints` (issue 19: they showed Python reprs such as
``params={'inp': {'missing': ['__restrict__'], ...}}``). In the editor the evidence is the Markdown hover's table
(``lsp.hover``); the diagnostic keeps what and why."""

from __future__ import annotations

from pathlib import Path

from conftest import NVCC, ROOT
from warpforge.lsp.convert import diagnostic
from warpforge.lsp.hover import markdown
from warpforge.profile.hints import analyze_source


def test_every_hint_on_the_reference_kernels_reads_without_python_reprs() -> None:
    seen = 0
    for path in sorted((ROOT / "kernels").glob("*.cu")):
        report = analyze_source(str(path), path.read_text(), use_compiler=NVCC is not None)
        for f in report.findings:
            msg = diagnostic(f, Path(path).as_uri()).message
            table = [row for row in markdown(f).split("\n") if row.startswith("| ")]
            # Python reprs: dicts, lists of strings, booleans (source expressions such as bins[v] are fine)
            for tail in (msg[len(f.message):], "\n".join(table)):
                assert not any(s in tail for s in ("{", "['", "': ", "True", "False", "None")), (f.code, tail)
            seen += 1
    assert seen >= 9


def test_nested_evidence_is_left_to_the_message_and_the_data() -> None:
    path = ROOT / "kernels" / "saxpy.cu"
    report = analyze_source(str(path), path.read_text(), use_compiler=NVCC is not None)
    wf101 = next(f for f in report.findings if f.code == "WF101")
    assert "params" in wf101.evidence  # still there for tools (JSON, diagnostic data)
    assert wf101.evidence_text() == "written y" or wf101.evidence_text().startswith("written y;")
    d = diagnostic(wf101, path.as_uri())
    assert "| written | y |" in markdown(wf101) and "missing" not in markdown(wf101) and "missing" not in d.message
    assert isinstance(d.data, dict) and d.data["evidence"]["params"]["x"]["missing"] == ["__restrict__"]
