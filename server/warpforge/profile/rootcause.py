"""One root cause, one finding: findings that several analyzers raise about the same cause are folded into
the one that names the cause, with the others' lines attached as related locations.

Why: each analyzer is right about what it sees, but a user shown three hints for one problem reads three
problems, fixes the symptom one names and keeps the cause. The analyzers' own evidence says when two
findings share a cause, so folding needs no guesswork:

- **a serial row walk** (WF111) is why the walked accesses are strided across the lanes of a warp: a WF103
  whose access lies in one of the walk's loops (its ``row_loop_line`` is one of WF111's ``loops``) is folded
  into the WF111; the fix, a warp per row, coalesces those accesses too;
- **data reuse left to global memory** (WF112) is why a shared load is also strided (``k[col * D + d]`` read
  by a column of threads): a WF103 on a buffer and line of the WF112's shared loads is folded into the WF112;
  a tile staged in shared memory is loaded coalesced;
- **runtime integer divisions of one kernel's index arithmetic** (WF107, one finding per dividend and divisor)
  are one decomposition of a flat index into coordinates, with one fix (a multi-dimensional launch or
  compile-time sizes): the WF107s of a kernel found at the same place (per element, or in the same loop) become
  the first one, the others related.

A folded finding keeps its own related locations; the host's evidence lists what was folded (``merged``:
code, action, line, message), so the offline policy still sees every action the folded findings motivate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .findings import Finding


def _key(f: Finding) -> tuple[str, str | None]:
    return f.file, f.kernel


def _fold(host: Finding, guests: Sequence[Finding]) -> Finding:
    if not guests:
        return host
    related = list(host.related)
    merged: list[dict[str, Any]] = list(host.evidence.get("merged", []))
    for g in guests:
        related.append((g.range, f"{g.code}: {g.message}"))
        related.extend(g.related)
        merged.append({"code": g.code, "action": g.action, "line": g.line, "message": g.message})
    return replace(host, related=tuple(related), evidence={**host.evidence, "merged": merged})


def _row_walk(host: Finding, guest: Finding) -> bool:
    loops = host.evidence.get("loops")
    line = guest.evidence.get("row_loop_line")
    return isinstance(loops, list) and line is not None and line in loops


def _reuse(host: Finding, guest: Finding) -> bool:
    buffers = host.evidence.get("buffers")
    lines = set(guest.evidence.get("lines") or [guest.line])
    if not isinstance(buffers, list):
        return False
    return any(isinstance(b, dict) and b.get("buffer") == guest.evidence.get("buffer")
               and lines & set(b.get("lines") or []) for b in buffers)


def _same_place(host: Finding, guest: Finding) -> bool:
    return host.evidence.get("where") == guest.evidence.get("where")


#: (host code, guest code, do they share a cause?)
_RULES: tuple[tuple[str, str, Callable[[Finding, Finding], bool]], ...] = (
    ("WF111", "WF103", _row_walk),
    ("WF112", "WF103", _reuse),
    ("WF107", "WF107", _same_place),
)


def merge_root_causes(findings: Sequence[Finding]) -> list[Finding]:
    """The findings with those of one root cause folded into one (see the module docstring); order kept."""
    out = list(findings)
    for host_code, guest_code, shares in _RULES:
        folded: dict[int, list[Finding]] = {}
        gone: set[int] = set()
        for hi, host in enumerate(out):
            if host.code != host_code or hi in gone:
                continue
            for gi, guest in enumerate(out):
                if gi == hi or gi in gone or gi in folded or guest.code != guest_code:
                    continue
                if _key(guest) != _key(host) or not shares(host, guest):
                    continue
                if host_code == guest_code and gi < hi:
                    continue  # same code: the first one hosts
                folded.setdefault(hi, []).append(guest)
                gone.add(gi)
        out = [_fold(f, folded.get(i, [])) for i, f in enumerate(out) if i not in gone]
    return out
