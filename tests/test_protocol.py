"""The server's typed protocol (``warpforge.lsp.protocol``) against the client's (``extension/src/protocol.ts``).

The TypeScript interfaces are read with a small reader of that one file (exported interfaces, one field
per line, ``?`` for a field that may be left out) and compared by name, field names and optionality with
the dataclasses the server sends; the command and notification names are compared too. A field added on
one side only fails here, before a client guesses at a shape the server does not send.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from warpforge.lsp import protocol

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL_TS = ROOT / "extension" / "src" / "protocol.ts"

_INTERFACE = re.compile(r"^export interface (\w+) \{\n(.*?)^\}", re.M | re.S)
_FIELD = re.compile(r"^  (\w+)(\??):", re.M)  # a field of the interface itself (nested ones are indented deeper)
_CONST = re.compile(r"^export const (\w+) = '([^']*)';", re.M)
_CMD = re.compile(r"^  (\w+): '([^']*)',", re.M)

Shape = dict[str, dict[str, bool]]  # interface -> field -> optional


def ts_interfaces(source: str) -> Shape:
    """Every exported interface of a protocol.ts text: its fields, and whether each is optional."""
    return {m.group(1): {f.group(1): f.group(2) == "?" for f in _FIELD.finditer(m.group(2))}
            for m in _INTERFACE.finditer(source)}


def py_interfaces() -> Shape:
    """The same for the server's dataclasses: wire names, optional where the field has a default."""
    return {name: {f.metadata.get("wire", f.name): (f.default is not dataclasses.MISSING
                                                    or f.default_factory is not dataclasses.MISSING)
                   for f in dataclasses.fields(cls)}
            for name, cls in protocol.INTERFACES.items()}


def differences(ts: Shape, py: Shape) -> list[str]:
    out = [f"{n}: only in protocol.ts" for n in sorted(ts.keys() - py.keys())]
    out += [f"{n}: only in protocol.py" for n in sorted(py.keys() - ts.keys())]
    for name in sorted(ts.keys() & py.keys()):
        a, b = ts[name], py[name]
        out += [f"{name}.{f}: only in protocol.ts" for f in sorted(a.keys() - b.keys())]
        out += [f"{name}.{f}: only in protocol.py" for f in sorted(b.keys() - a.keys())]
        out += [f"{name}.{f}: optional in {'protocol.ts' if a[f] else 'protocol.py'} only"
                for f in sorted(a.keys() & b.keys()) if a[f] != b[f]]
    return out


def test_every_interface_matches_its_dataclass() -> None:
    ts = ts_interfaces(PROTOCOL_TS.read_text(encoding="utf-8"))
    assert {"CandidateParams", "JobDoneParams", "SearchTree", "Evidence"} <= ts.keys()  # the reader reads
    assert differences(ts, py_interfaces()) == []


def test_command_and_notification_names_match() -> None:
    source = PROTOCOL_TS.read_text(encoding="utf-8")
    consts = dict(_CONST.findall(source))
    cmd_block = source[source.index("export const Cmd = {"):source.index("} as const;")]
    cmds = dict(_CMD.findall(cmd_block))
    assert cmds == {"optimize": protocol.CMD_OPTIMIZE, "cancel": protocol.CMD_CANCEL, "accept": protocol.CMD_ACCEPT,
                    "reject": protocol.CMD_REJECT, "showCandidate": protocol.CMD_SHOW_CANDIDATE,
                    "addSpec": protocol.CMD_ADD_SPEC, "profile": protocol.CMD_PROFILE,
                    "acceptHunks": protocol.CMD_ACCEPT_HUNKS, "specNotice": protocol.CMD_SPEC_NOTICE}
    assert consts == {"CandidateNotification": protocol.CANDIDATE_NOTIFICATION,
                      "JobDoneNotification": protocol.JOB_DONE_NOTIFICATION,
                      "SearchTreeRequest": protocol.SEARCH_TREE_REQUEST,
                      "GpuStatusRequest": protocol.GPU_STATUS_REQUEST,
                      "AnalysisNotification": protocol.ANALYSIS_NOTIFICATION,
                      "JOB_TOKEN_PREFIX": protocol.JOB_TOKEN_PREFIX}


@pytest.mark.parametrize(("edit", "expected"), [
    (("  speedup: number;\n  /** relative", "  speedup?: number;\n  /** relative"),
     "CandidateParams.speedup: optional in protocol.ts only"),
    (("  rounds?: number;\n", "  rounds?: number;\n  depth?: number;\n"), "SearchTree.depth: only in protocol.ts"),
    (("export interface CancelResult {", "export interface Cancelled {"), "Cancelled: only in protocol.ts"),
    (("  class?: string | null;\n", ""), "JobDoneParams.class: only in protocol.py"),
])
def test_a_drift_on_either_side_is_reported(edit: tuple[str, str], expected: str) -> None:
    source = PROTOCOL_TS.read_text(encoding="utf-8")
    assert edit[0] in source
    assert expected in differences(ts_interfaces(source.replace(edit[0], edit[1], 1)), py_interfaces())


def test_wire_sends_required_fields_always_and_optional_ones_when_set() -> None:
    done = protocol.JobDoneParams(job="profile-1", kind="profile", uri="file:///k.cu", kernel="k", state="done",
                                  outcome="done", message="memory-bound (k)", candidate=None, speedup=None,
                                  evaluations=0, cls="memory-bound", findings=3)
    assert protocol.wire(done) == {
        "job": "profile-1", "kind": "profile", "uri": "file:///k.cu", "kernel": "k", "state": "done",
        "outcome": "done", "message": "memory-bound (k)", "candidate": None, "speedup": None, "evaluations": 0,
        "class": "memory-bound", "findings": 3}  # no "notice": it was not set
    cand = protocol.CandidateParams(job="job-1", uri="u", kernel="k", candidate="c1", speedup=1.5,
                                    evidence=protocol.Evidence(seeds=3, sizes=["spec", "odd"]))
    assert protocol.wire(cand)["evidence"] == {"seeds": 3, "sizes": ["spec", "odd"]}
    assert "spread" not in protocol.wire(cand)


def test_search_tree_from_a_search_result() -> None:
    data = {"strategy": "beam", "stopped": "budget", "evaluations": 2, "seconds": 0.5, "rounds": 1, "best": 1,
            "best_speedup": 1.2, "history": [{"evaluations": 1, "best_speedup": 1.0}],
            "nodes": [{"id": 0, "parent": None, "family": "original", "rationale": "", "status": "ok", "reason": "",
                       "speedup": 1.0, "depth": 0, "visits": 1, "eval_index": 0, "children": []}]}
    tree = protocol.SearchTree.from_json(data, job="job-1", kernel="k", uri="u", state="done", message="m")
    out = protocol.wire(tree)
    assert out["nodes"][0]["family"] == "original" and out["history"] == data["history"]
    assert set(out) == set(py_interfaces()["SearchTree"])  # everything a finished search has is sent
