"""What the model is told about a kernel, and the local compile check the fixer relies on.

Why a brief: the default is to send the kernel, the declarations it needs, its spec and its findings —
nothing else from the user's file (no host code, no other kernels, no paths) unless ``send_context`` is
"file". Building that text in one place makes the rule auditable, and keeping it identical across calls
makes it the cacheable static block of every prompt for the kernel.

Why compile locally: a candidate that does not compile would spend an evaluation (and a GPU slot) to learn
what nvcc says in half a second on this machine; the fixer repairs it from the compiler's own messages
first, with line numbers relative to the code the model wrote.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...compiler.build import compile_cubin
from ...compiler.toolchain import ToolMissing
from ...cuda.candidate import Candidate
from ...cuda.extract import standalone
from ...cuda.model import FileModel, Kernel
from ...cuda.text import SourceText
from ...spec.model import KernelSpec

#: the FP32 ridge point of an H100 (≈67 TFLOP/s over ≈3.35 TB/s): below it a kernel is bandwidth-bound
RIDGE_FLOP_PER_BYTE = 20.0


def _get(f: Any, name: str, default: Any = None) -> Any:
    return f.get(name, default) if isinstance(f, Mapping) else getattr(f, name, default)


def bottleneck_class(findings: Sequence[Any], spec: KernelSpec | None) -> str:
    """The bottleneck class: the profiler's when a finding carries one, else a static roofline estimate."""
    for f in findings:
        ev = _get(f, "evidence") or {}
        if isinstance(ev, Mapping):
            for key in ("bottleneck", "roofline", "bound"):
                v = ev.get(key)
                if isinstance(v, str) and v:
                    return f"{v} (from the profile)"
    if spec is not None and spec.flops and spec.bytes:
        try:
            r = spec.resolve()
        except Exception:
            r = None
        if r is not None and r.flops and r.bytes:
            ai = r.flops / r.bytes
            if ai < RIDGE_FLOP_PER_BYTE / 2:
                kind = "memory-bound"
            elif ai > RIDGE_FLOP_PER_BYTE * 2:
                kind = "compute-bound"
            else:
                kind = "balanced (near the ridge point)"
            return (f"{kind} (static estimate from the spec: {ai:.2f} FLOP/byte against a ridge of about "
                    f"{RIDGE_FLOP_PER_BYTE:.0f} FLOP/byte for FP32 on an H100; not yet profiled)")
    return "unknown (no profile yet and no flops/bytes in the spec)"


def _finding_dict(f: Any, kernel_first_line: int, kernel_last_line: int) -> dict[str, Any]:
    line = _get(f, "line")
    rel: int | None = None
    if isinstance(line, int) and kernel_first_line <= line <= kernel_last_line:
        rel = line - kernel_first_line + 1
    out: dict[str, Any] = {"code": str(_get(f, "code", "")), "message": str(_get(f, "message", ""))}
    if rel is not None:
        out["kernel_line"] = rel
    sev = _get(f, "severity")
    if sev is not None:
        out["severity"] = str(getattr(sev, "value", sev))
    ev = _get(f, "evidence")
    if isinstance(ev, Mapping) and ev:
        out["evidence"] = {str(k): v for k, v in ev.items() if isinstance(v, (int, float, str, bool))}
    if act := _get(f, "action"):
        out["action"] = str(act)
    if (gain := _get(f, "gain")) is not None:
        out["estimated_gain"] = gain
    return out


def declarations_text(src: SourceText, model: FileModel, kernel: Kernel) -> str:
    """The includes and top-level declarations the kernel needs, as written in the file (no #line noise)."""
    unit = standalone(src, model, kernel)
    ktext = src.slice(kernel.span)
    idx = unit.rfind(ktext)
    head = unit[:idx] if idx >= 0 else unit
    lines = [ln for ln in head.splitlines() if not ln.startswith("#line ")]
    text = "\n".join(lines).strip()
    return re.sub(r'extern "C"\s*$', "", text).strip()


@dataclass(frozen=True)
class KernelBrief:
    """The static context of every prompt about one kernel (the cached block)."""

    name: str
    original: str
    declarations: str
    spec: str
    findings: tuple[dict[str, Any], ...]
    bottleneck: str
    signature: str
    first_line: int
    file_text: str | None = None

    def text(self) -> str:
        parts = [f"# The kernel `{self.name}`", "", "Original definition (the oracle every variant is checked "
                 "against):", "```cuda", self.original.rstrip(), "```", ""]
        parts += ["Declarations the kernel uses (already in the file; available to every variant):", "```cuda",
                  self.declarations or "// (none besides the kernel itself)", "```", ""]
        parts += ["Spec (sizes, arguments, launch, tolerances; WarpForge annotation format):", "```",
                  self.spec.rstrip() or "(no spec)", "```", ""]
        parts += [f"Bottleneck class: {self.bottleneck}", ""]
        if self.findings:
            parts.append("Findings (static analysis and profiler; `kernel_line` counts from the first line of "
                         "the definition above):")
            for f in self.findings:
                parts.append("- " + ", ".join(f"{k}={v!r}" if k != "message" else str(v) for k, v in f.items()))
        else:
            parts.append("Findings: none recorded.")
        if self.file_text is not None:
            parts += ["", "The whole file (sent because the user configured send_context=file):", "```cuda",
                      self.file_text.rstrip(), "```"]
        return "\n".join(parts) + "\n"


def build_brief(
    src: SourceText,
    model: FileModel,
    kernel: Kernel,
    spec: KernelSpec | None,
    findings: Sequence[Any],
    *,
    send_context: str = "kernel",
) -> KernelBrief:
    first = src.line_of(kernel.span.start) + 1
    last = src.line_of(max(kernel.span.start, kernel.span.end - 1)) + 1
    mine = [f for f in findings if _get(f, "kernel") in (None, kernel.name, kernel.qualified_name)]
    return KernelBrief(
        name=kernel.name,
        original=src.slice(kernel.span),
        declarations=declarations_text(src, model, kernel),
        spec=spec.to_annotation() if spec is not None else "",
        findings=tuple(_finding_dict(f, first, last) for f in mine),
        bottleneck=bottleneck_class(mine, spec),
        signature=src.slice(kernel.signature_span),
        first_line=first,
        file_text=src.text if send_context == "file" else None,
    )


# --------------------------------------------------------------------------- local compile
@dataclass(frozen=True)
class CompileCheck:
    ok: bool
    #: False when there is no nvcc here: the candidate goes to the evaluator unchecked
    available: bool
    #: compiler messages with lines relative to the candidate's code (what the fixer is shown)
    log: str = ""
    seconds: float = 0.0


_PATH = re.compile(r"(?:/[\w.+-]+)+/([\w.+-]+)")


class LocalCompiler:
    """Compiles a candidate the way the evaluator does (standalone unit, spec's tunables, cubin only)."""

    def __init__(self, src: SourceText, model: FileModel, kernel: Kernel, spec: KernelSpec | None,
                 arch: str = "sm_90", nvcc: str | None = None) -> None:
        self.src, self.model, self.kernel, self.spec = src, model, kernel, spec
        self.arch = arch
        self.nvcc = nvcc
        self.first_line = src.line_of(kernel.span.start) + 1

    def check(self, candidate: Candidate) -> CompileCheck:
        tmpl = tuple(self.spec.template_args) if self.spec is not None and self.spec.template_args else None
        unit = standalone(self.src, self.model, self.kernel, definition=candidate.source, filename="kernel.cu",
                          instantiate=tmpl)
        defines = {t.name: t.values[0] for t in self.spec.tunables} if self.spec is not None else {}
        defines.update(candidate.defines)
        try:
            build = compile_cubin(unit, arch=self.arch, defines=defines, flags=list(candidate.flags),
                                  filename="kernel.cu", nvcc=self.nvcc)
        except ToolMissing:
            return CompileCheck(False, False, "nvcc is not available on this machine")
        if build.ok:
            return CompileCheck(True, True, "", build.seconds)
        lines: list[str] = []
        for m in build.messages:
            if m.severity not in ("error", "warning"):
                continue
            if m.line >= self.first_line:
                where = f"line {m.line - self.first_line + 1}"
            elif m.line > 0:
                where = "in the file's declarations"
            else:
                where = "ptxas" if m.code == "ptxas" else "compiler"
            lines.append(f"{where}: {m.severity}: {m.text}")
        if not any(" error: " in ln for ln in lines):
            tail = [ln for ln in build.log.splitlines() if ln.strip()][-30:]
            lines += [_PATH.sub(r"\1", ln) for ln in tail]
        if build.timed_out:
            lines.append("the compiler timed out")
        return CompileCheck(False, True, "\n".join(lines[:60]), build.seconds)
