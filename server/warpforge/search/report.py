"""A self-contained HTML report of one optimization: the result, the search tree, the speedup curve.

Something an engineer would share: no external assets (inline CSS and SVG), readable in light and dark
mode, every node with its family, status, reason and speedup, and the winner's diff.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .engine import SearchResult
from .tree import Node

_STATUS_COLOR = {
    "ok": "#2e9d5b",
    "compile_error": "#c98a1b",
    "incorrect": "#d1453b",
    "crashed": "#8e44ad",
    "timeout": "#8e44ad",
    "suspicious": "#d1453b",
    "racy": "#d1453b",
    "rejected": "#777",
    "pending": "#999",
}


@dataclass
class ReportInfo:
    file: str
    kernel: str
    gpu: str = ""
    baseline_us: float | None = None
    best_us: float | None = None
    diff: str = ""
    evidence: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the result against the kernel's physical limit, in words (``profile.limit``; "" when unknown)
    limit: str = ""


def _plot(result: SearchResult, width: int = 640, height: int = 240) -> str:
    """Best verified speedup over evaluations (step line) plus each evaluation as a dot by status."""
    nodes = sorted((n for n in result.nodes if n.eval_index is not None), key=lambda n: n.eval_index or 0)
    if not nodes:
        return "<p>No evaluations.</p>"
    n_max = max(n.eval_index or 0 for n in nodes)
    speeds = [n.speedup for n in nodes if n.speedup]
    y_max = max([*speeds, *(s for _, s in result.history), 1.2]) * 1.1
    y_min = min([*speeds, 1.0, *(s for _, s in result.history)]) * 0.9
    pad_l, pad_b, pad_t, pad_r = 48, 28, 10, 10
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def x(i: float) -> float:
        return pad_l + (i - 1) / max(1, n_max - 1) * w

    def y(v: float) -> float:
        lv, lo, hi = math.log(max(v, 1e-6)), math.log(y_min), math.log(y_max)
        return pad_t + h - (lv - lo) / max(1e-9, hi - lo) * h

    pts = []
    prev = 1.0
    for i, s in result.history:
        pts.append(f"{x(i):.1f},{y(prev):.1f}")
        pts.append(f"{x(i):.1f},{y(s):.1f}")
        prev = s
    parts = [f'<svg viewBox="0 0 {width} {height}" class="plot" role="img" '
             f'aria-label="best speedup over evaluations">']
    for v in (1.0, 1.5, 2, 3, 5, 10, 20, 50):
        if y_min <= v <= y_max:
            parts.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
                         f'<text x="{pad_l - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="axis">{v:g}×</text>')
    parts.append(f'<polyline points="{" ".join(pts)}" class="best"/>')
    for n in nodes:
        v = n.speedup if n.speedup else y_min
        color = _STATUS_COLOR.get(n.status, "#999")
        parts.append(f'<circle cx="{x(n.eval_index or 1):.1f}" cy="{y(v):.1f}" r="3.5" fill="{color}">'
                     f'<title>#{n.eval_index} {html.escape(n.candidate.family)}: {html.escape(n.status)}'
                     f'{f" {n.speedup:.2f}×" if n.speedup else ""}</title></circle>')
    parts.append(f'<text x="{pad_l + w / 2}" y="{height - 6}" text-anchor="middle" class="axis">evaluations</text>')
    parts.append("</svg>")
    return "".join(parts)


def _node_html(n: Node, best: Node) -> str:
    ev = n.evaluation
    color = _STATUS_COLOR.get(n.status, "#999")
    speed = f"{n.speedup:.2f}×" if n.speedup else ""
    reason = html.escape(ev.reason) if ev is not None and ev.reason else ""
    cls = ' class="winner"' if n is best else ""
    label = (f'<span class="fam">{html.escape(n.candidate.family)}</span> '
             f'<span class="status" style="color:{color}">{html.escape(n.status)}</span> '
             f'<span class="speed">{speed}</span> <span class="reason">{reason}</span>'
             f'<div class="why">{html.escape(n.candidate.rationale)}</div>')
    if not n.children:
        return f"<li{cls}>{label}</li>"
    kids = "".join(_node_html(c, best) for c in n.children)
    return f"<li{cls}><details open><summary>{label}</summary><ul>{kids}</ul></details></li>"


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        cls = "add" if line.startswith("+") and not line.startswith("+++") else (
            "del" if line.startswith("-") and not line.startswith("---") else (
                "hunk" if line.startswith("@@") else ""))
        lines.append(f'<span class="{cls}">{html.escape(line)}</span>')
    return "<pre class=\"diff\">" + "\n".join(lines) + "</pre>"


def _list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>" if items else ""


CSS = """
:root { color-scheme: light dark; --fg:#1b1f24; --bg:#fff; --muted:#6a737d; --line:#d0d7de; --add:#1a7f37;
        --del:#cf222e; --hl:#fff8c5; }
@media (prefers-color-scheme: dark) { :root { --fg:#e6edf3; --bg:#0d1117; --muted:#8b949e; --line:#30363d;
        --add:#3fb950; --del:#f85149; --hl:#3b2e00; } }
body { font: 14px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg); margin: 2rem auto;
       max-width: 960px; padding: 0 1rem; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
.big { font-size: 2rem; font-weight: 600; } .muted { color: var(--muted); }
.plot { width: 100%; max-width: 640px; } .plot .grid { stroke: var(--line); stroke-width: 1; }
.plot .axis { fill: var(--muted); font-size: 11px; } .plot .best { fill: none; stroke: #2f81f7; stroke-width: 2; }
ul { list-style: none; padding-left: 1.2rem; } li { margin: .15rem 0; }
.fam { font-weight: 600; } .speed { font-variant-numeric: tabular-nums; } .reason, .why { color: var(--muted); }
.why { font-size: 12px; } .winner > details > summary, li.winner { background: var(--hl); }
pre.diff { border: 1px solid var(--line); padding: .6rem; overflow-x: auto; font-size: 12px; }
.add { color: var(--add); } .del { color: var(--del); } .hunk { color: var(--muted); }
"""


def render(result: SearchResult, info: ReportInfo) -> str:
    best = result.best
    headline = (f"{result.best_speedup:.2f}× faster" if result.improved else "no verified faster variant")
    timing = ""
    if info.baseline_us is not None and info.best_us is not None and result.improved:
        timing = f" ({info.baseline_us:.1f} µs → {info.best_us:.1f} µs)"
    counts: dict[str, int] = {}
    for n in result.nodes:
        if n.evaluation is not None:
            counts[n.status] = counts.get(n.status, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>WarpForge: {html.escape(info.kernel)}</title>
<style>{CSS}</style></head><body>
<h1>WarpForge optimization of <code>{html.escape(info.kernel)}</code>
<span class="muted">in {html.escape(info.file)}</span></h1>
<p class="big">{headline}{timing}</p>
{f'<p class="limit">{html.escape(info.limit)}</p>' if info.limit else ""}
<p class="muted">{html.escape(info.gpu)} · {result.strategy} search · {result.evaluations} evaluations ({summary})
 · {result.seconds:.1f} s · stopped: {html.escape(result.stopped)}</p>
{_list(info.evidence)}
<h2>Best verified speedup over evaluations</h2>
{_plot(result)}
<h2>Winning variant</h2>
{_diff_html(info.diff) if info.diff and result.improved else "<p>The original kernel stays the fastest verified.</p>"}
<p class="muted">{html.escape(" + ".join(best.families) or "original")}</p>
{"<h2>Findings that motivated the search</h2>" + _list(info.findings) if info.findings else ""}
<h2>Search tree</h2>
<ul class="tree">{_node_html(result.root, best)}</ul>
{"<h2>Notes</h2>" + _list(info.notes) if info.notes else ""}
</body></html>
"""
