"""CUDA source model on tree-sitter-cuda: kernels, dependencies, launch sites, byte-exact rewrites."""

from .model import (
    Declaration,
    DeclKind,
    FileModel,
    Include,
    Kernel,
    KernelNotFound,
    LaunchBounds,
    LaunchSite,
    Param,
    SyntaxProblem,
    TemplateParam,
    kernel_at_position,
)
from .parser import parse
from .text import Position, Range, SourceText, Span

__all__ = [
    "DeclKind",
    "Declaration",
    "FileModel",
    "Include",
    "Kernel",
    "KernelNotFound",
    "LaunchBounds",
    "LaunchSite",
    "Param",
    "Position",
    "Range",
    "SourceText",
    "Span",
    "SyntaxProblem",
    "TemplateParam",
    "kernel_at_position",
    "parse",
]
