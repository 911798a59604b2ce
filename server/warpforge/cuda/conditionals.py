"""Which ``#if`` branches of a file hold, read without running the preprocessor.

Why: real code chooses its element type under conditionals, and the choice is made by a define written
somewhere else. llm.c's ``llmc/cuda_common.h`` says::

    #if defined(ENABLE_FP32)
    typedef float floatX;
    #elif defined(ENABLE_FP16)
    typedef half floatX;
    #else
    typedef __nv_bfloat16 floatX;
    #endif

and ``dev/cuda/common.h`` the same in the other order, with ``#define ENABLE_BF16`` written at the top of the
kernel file that includes it. Read branch-blind, the last ``typedef`` wins: ``floatX`` was ``float`` in files
that compile it as ``__nv_bfloat16``, and the spec gave those buffers 4-byte elements. The editor reads
aliases on every edit (no process may run there), so the conditionals are evaluated here, on the directives
alone, with what is known: the build's ``-D`` defines, the ``#define``/``#undef`` lines met so far in include
order, and nvcc's own predefined macros for the device pass WarpForge builds (``sm_90``).

A condition is *known* when every name it reads is known: a macro seen defined (or undefined) so far, a
predefined one, or a name the project could only define itself (no leading underscore: an undefined one is
0, as the C preprocessor says). A name with a leading underscore that is not predefined (``__CUDA_BF16_TYPES_EXIST__``)
may come from a system header this reader never opens: the condition is *unknown*, and every branch of its
``#if`` chain is kept, which is what the branch-blind reading did (nothing is lost where nothing is known).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

#: what nvcc defines for the device pass of ``-arch=sm_90 -std=c++17`` (toolkit 13.0): the pass that
#: compiles a kernel, so the one whose typedefs its parameters see
PREDEFINED: Mapping[str, str] = {
    "__CUDACC__": "1", "__NVCC__": "1", "__CUDA_ARCH__": "900", "__CUDACC_VER_MAJOR__": "13",
    "__CUDACC_VER_MINOR__": "0", "__cplusplus": "201703L", "__CUDA__": "1",
}

_DIRECTIVE = re.compile(
    r"[ \t]*#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif|define|undef|include)\b[ \t]*(.*)")
_HASH_LINE = re.compile(rb"^[ \t]*#", re.M)
_INCLUDE = re.compile(r'^"([^"]+)"')
_DEFINE = re.compile(r"^([A-Za-z_]\w*)(\()?[ \t]*(.*)$")
_TOKEN = re.compile(
    r"\s*(defined\b|0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*|[A-Za-z_]\w*|&&|\|\||==|!=|<=|>=|<<|>>|[!()<>+\-*/%])")
_COMMENT = re.compile(r"/\*.*?\*/|//.*$")


@dataclass(frozen=True)
class Directive:
    """One preprocessor line: its kind, its text after the keyword (comments removed) and where it starts."""

    kind: str
    arg: str
    offset: int


def directives(data: bytes) -> tuple[Directive, ...]:
    """The conditional, define and include lines of a file's bytes in order (continued lines joined), each
    at the byte offset where its line starts (the offsets ``SourceText`` spans use)."""
    out: list[Directive] = []
    n = len(data)
    for m in _HASH_LINE.finditer(data):
        start = m.start()
        end = data.find(b"\n", start)
        end = n if end < 0 else end
        line = data[start:end]
        while line.rstrip(b"\r").endswith(b"\\") and end < n:  # a continued line
            nxt = data.find(b"\n", end + 1)
            nxt = n if nxt < 0 else nxt
            line = line.rstrip(b"\r")[:-1] + b" " + data[end + 1 : nxt]
            end = nxt
        d = _DIRECTIVE.match(line.decode("utf-8", "replace").rstrip("\r"))
        if d is not None:
            out.append(Directive(d.group(1), " ".join(_COMMENT.sub(" ", d.group(2)).split()), start))
    return tuple(out)


class Unknown(Exception):
    """A condition reads a name this reader cannot know."""


def evaluate(expr: str, macros: Mapping[str, str | None]) -> bool | None:
    """``expr`` of an ``#if`` under ``macros`` (name -> value; ``None``: seen ``#undef``): true, false, or
    ``None`` when it reads a name that cannot be known here (see the module) or is not an expression this
    reader evaluates."""
    try:
        return bool(_Eval(expr, macros).run())
    except (Unknown, ValueError, ZeroDivisionError, IndexError, RecursionError):
        return None


class _Eval:
    """A recursive-descent reader of the C preprocessor's integer expressions (no ``?:``, no casts)."""

    _BINARY: tuple[tuple[str, ...], ...] = (("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="),
                                            ("<<", ">>"), ("+", "-"), ("*", "/", "%"))

    def __init__(self, expr: str, macros: Mapping[str, str | None], depth: int = 0) -> None:
        self.macros = macros
        self.depth = depth
        self.toks: list[str] = []
        pos = 0
        expr = expr.strip()
        while pos < len(expr):
            m = _TOKEN.match(expr, pos)
            if m is None:
                if expr[pos:].strip() == "":
                    break
                raise ValueError(expr[pos:])
            self.toks.append(m.group(1))
            pos = m.end()
        self.i = 0

    def run(self) -> int:
        v = self.binary(0)
        if self.i != len(self.toks):
            raise ValueError("trailing tokens")
        return v

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def take(self) -> str:
        t = self.toks[self.i]
        self.i += 1
        return t

    def binary(self, level: int) -> int:
        if level == len(self._BINARY):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._BINARY[level]:
            op = self.take()
            right = self.binary(level + 1)
            left = _apply(op, left, right)
        return left

    def unary(self) -> int:
        t = self.take()
        if t == "!":
            return int(not self.unary())
        if t == "-":
            return -self.unary()
        if t == "+":
            return self.unary()
        if t == "(":
            v = self.binary(0)
            if self.take() != ")":
                raise ValueError("unbalanced")
            return v
        if t == "defined":
            paren = self.peek() == "("
            if paren:
                self.take()
            name = self.take()
            if paren and self.take() != ")":
                raise ValueError("unbalanced")
            return int(_defined(name, self.macros))
        if t[0].isdigit():
            return int(t.rstrip("uUlL"), 0)
        return self.name(t)

    def name(self, t: str) -> int:
        if t in self.macros:
            value = self.macros[t]
            if value is None:
                return 0
            if self.depth > 8:
                raise Unknown(t)
            return _Eval(value or "1", self.macros, self.depth + 1).run() if value.strip() else 1
        if t in PREDEFINED:
            return _Eval(PREDEFINED[t], self.macros, self.depth + 1).run()
        if t.startswith("_"):
            raise Unknown(t)
        if self.peek() == "(":
            raise Unknown(t)  # a function-like macro this reader does not expand
        return 0


def _defined(name: str, macros: Mapping[str, str | None]) -> bool:
    if name in macros:
        return macros[name] is not None
    if name in PREDEFINED:
        return True
    if name.startswith("_"):
        raise Unknown(name)
    return False


def _apply(op: str, a: int, b: int) -> int:
    if op == "||":
        return int(bool(a) or bool(b))
    if op == "&&":
        return int(bool(a) and bool(b))
    ops = {"==": a == b, "!=": a != b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}
    if op in ops:
        return int(ops[op])
    if op == "<<":
        return a << b
    if op == ">>":
        return a >> b
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return int(a / b)
    return a % b


@dataclass
class _Frame:
    """One open ``#if`` chain: whether the branch now read holds, whether an earlier one did, and whether the
    chain's conditions could not be evaluated (then every branch is kept)."""

    outer: bool
    active: bool
    taken: bool
    unknown: bool


def walk(items: tuple[Directive, ...], macros: MutableMapping[str, str | None]) -> Iterator[tuple[Directive, bool]]:
    """Each directive of a file with whether the text after it (to the next directive) sits in branches that
    hold, applying ``#define``/``#undef`` of holding branches to ``macros`` as it goes. For an ``#include``
    the flag says whether it is read: the caller follows it, with the same ``macros``, before asking for the
    next directive, so a header sees the defines written above its include line."""
    stack: list[_Frame] = []

    def here() -> bool:
        return stack[-1].active if stack else True

    for d in items:
        k = d.kind
        if k in ("if", "ifdef", "ifndef"):
            outer = here()
            v = _condition(k, d.arg, macros)
            stack.append(_Frame(outer, outer and v is not False, v is True, v is None))
        elif k in ("elif", "elifdef", "elifndef"):
            if not stack:
                continue
            f = stack[-1]
            if f.unknown:
                f.active = f.outer
            elif f.taken:
                f.active = False
            else:
                v = _condition({"elif": "if", "elifdef": "ifdef", "elifndef": "ifndef"}[k], d.arg, macros)
                if v is None:
                    f.unknown, f.active = True, f.outer
                else:
                    f.active, f.taken = f.outer and v, v
        elif k == "else":
            if not stack:
                continue
            f = stack[-1]
            f.active = f.outer if f.unknown else f.outer and not f.taken
            f.taken = True
        elif k == "endif":
            if stack:
                stack.pop()
        elif here() and k == "define":
            m = _DEFINE.match(d.arg)
            if m is not None:
                macros[m.group(1)] = "" if m.group(2) else m.group(3)
        elif here() and k == "undef" and d.arg:
            macros[d.arg.split()[0]] = None
        yield d, here()


def marks(data: bytes, defines: Mapping[str, str]) -> list[tuple[int, bool]]:
    """``walk``'s (offset, flag) marks of one file read alone under ``defines`` (its includes not followed)."""
    macros: dict[str, str | None] = dict(defines)
    return [(d.offset, on) for d, on in walk(directives(data), macros)]


def live(offset: int, marks: Sequence[tuple[int, bool]]) -> bool:
    """Is the text at ``offset`` in holding branches, given ``walk``'s (offset, flag) marks in order?"""
    state = True
    for at, on in marks:
        if at > offset:
            break
        state = on
    return state


def _condition(kind: str, arg: str, macros: Mapping[str, str | None]) -> bool | None:
    if kind == "if":
        return evaluate(arg, macros)
    name = arg.split()[0] if arg.split() else ""
    if not name:
        return None
    try:
        v = _defined(name, macros)
    except Unknown:
        return None
    return v if kind == "ifdef" else not v


def include_target(d: Directive) -> str | None:
    """The quoted path of an ``#include "..."`` line (system includes are not read)."""
    if d.kind != "include":
        return None
    m = _INCLUDE.match(d.arg)
    return m.group(1) if m else None
