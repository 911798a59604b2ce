"""Safe evaluation of the C-like arithmetic expressions in benchmark specs.

Spec annotations and inferred launch sites carry expressions such as ``(n + 255) / 256``, ``B*T*C``,
``cdiv(N, BLOCK)`` or ``N * sizeof(float)``. They come from files the user edits, so they are untrusted
text. This module tokenises and parses them itself (a Pratt parser producing an immutable AST) and
interprets that AST. It never hands text to ``eval``, ``exec``, ``compile`` or Python's ``ast``, so no
expression can reach a Python object, attribute, builtin or import: the only things an expression can
name are the numbers the caller passes in, a fixed set of functions and a fixed set of C types.

Semantics follow C wherever a size could come out differently: integer ``/`` and ``%`` truncate toward
zero, comparisons and logical operators give ``0``/``1``, ``&&``/``||``/``?:`` only evaluate the side
they need, casts to integer types truncate. One deliberate difference: integers never wrap. They are
mathematical integers, integer suffixes (``u``, ``ll``, ...) are accepted and ignored, and an
intermediate value beyond 2**64 in magnitude is an error instead of a silently wrong buffer size.

Work is bounded (text length, nesting depth, shift amounts, magnitude of every intermediate integer) and
evaluation is iterative, so a hostile or runaway spec cannot exhaust the stack, memory or CPU.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import functools
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeAlias

__all__ = [
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_MAGNITUDE",
    "MAX_SHIFT",
    "SIZEOF",
    "Expr",
    "ExprError",
    "Number",
    "evaluate",
    "is_constant",
    "parse",
]

Number: TypeAlias = int | float

MAX_LENGTH: Final = 2000
"""Longest accepted expression text; real specs are a few dozen characters."""

MAX_DEPTH: Final = 100
"""Deepest accepted nesting of sub-expressions (parentheses, operands, arguments, branches)."""

MAX_MAGNITUDE: Final = 2**64
"""Largest absolute value an integer may take at any step; anything bigger is not a real size."""

MAX_SHIFT: Final = 63
"""Largest accepted shift amount, as for a 64-bit integer in C (wider shifts are undefined there)."""

# Integer types a cast may name. Casts are limited to scalar types whose conversion Python does exactly:
# a cast to `half` would have to round to half precision, and a cast to `float4` is not arithmetic.
_INT_TYPES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "bool": 1,
        "char": 1,
        "signed char": 1,
        "unsigned char": 1,
        "short": 2,
        "short int": 2,
        "unsigned short": 2,
        "unsigned short int": 2,
        "int": 4,
        "signed": 4,
        "signed int": 4,
        "unsigned": 4,
        "unsigned int": 4,
        "long": 8,
        "long int": 8,
        "unsigned long": 8,
        "unsigned long int": 8,
        "long long": 8,
        "long long int": 8,
        "unsigned long long": 8,
        "unsigned long long int": 8,
        "size_t": 8,
        "ssize_t": 8,
        "ptrdiff_t": 8,
        "int8_t": 1,
        "uint8_t": 1,
        "int16_t": 2,
        "uint16_t": 2,
        "int32_t": 4,
        "uint32_t": 4,
        "int64_t": 8,
        "uint64_t": 8,
    }
)
_FLOAT_TYPES: Final[Mapping[str, int]] = MappingProxyType({"float": 4, "double": 8})

SIZEOF: Final[Mapping[str, int]] = MappingProxyType(
    {
        **_INT_TYPES,
        **_FLOAT_TYPES,
        "half": 2,
        "__half": 2,
        "bfloat16": 2,
        "__nv_bfloat16": 2,
        "half2": 4,
        "__half2": 4,
        "__nv_bfloat162": 4,
        "float2": 8,
        "float4": 16,
        "double2": 16,
        "int2": 8,
        "int4": 16,
        "uint2": 8,
        "uint4": 16,
        "char4": 4,
        "uchar4": 4,
    }
)
"""Types ``sizeof(T)`` knows, with their size in bytes on CUDA / x86-64 Linux (LP64), so that
``N * sizeof(T)`` matches what host code passes to ``cudaMalloc``. ``sizeof(T*)`` is 8."""

_POINTER_SIZE: Final = 8
_KNOWN_TYPES: Final = (
    ", ".join(sorted(name for name in SIZEOF if " " not in name))
    + ", and C spellings like `unsigned long long`; any `T*` is a pointer"
)

# C keywords that only ever start a type. They cannot be used as value names, so `(int)x` is always a
# cast and a stray `int` gets a message about types instead of "unknown name".
_TYPE_KEYWORDS: Final = frozenset(
    {"bool", "char", "double", "float", "int", "long", "short", "signed", "unsigned", "void"}
)


# --------------------------------------------------------------------------------------------- errors


class ExprError(ValueError):
    """A spec expression that cannot be parsed or evaluated.

    ``message`` is a one-line explanation for a human, ``column`` the 0-based character offset into
    ``text`` where the problem is (or -1 when it concerns the whole text), so editors can underline the
    exact spot. ``str()`` adds the text with a caret under that column.
    """

    def __init__(self, message: str, column: int = -1, text: str = "") -> None:
        self.message = message
        self.column = column
        self.text = text
        super().__init__(_describe(message, column, text))

    def __reduce__(self) -> tuple[type[ExprError], tuple[str, int, str]]:
        # Exceptions cross process boundaries (worker pools); the default reduce would call
        # __init__ with the formatted string only and lose the column.
        return (type(self), (self.message, self.column, self.text))


def _describe(message: str, column: int, text: str) -> str:
    """The message plus an excerpt of the text with a caret, windowed so long texts stay readable."""
    if column < 0 or not text:
        return message
    start = max(0, column - 50)
    end = min(len(text), column + 30)
    lead = "..." if start > 0 else ""
    tail = "..." if end < len(text) else ""
    excerpt = re.sub(r"\s", " ", text[start:end])
    caret = " " * (len(lead) + column - start) + "^"
    return f"{message}\n    {lead}{excerpt}{tail}\n    {caret}"


class _Fail(Exception):
    """Internal: an evaluation failure, located by the evaluator at the node being computed."""

    def __init__(self, message: str, column: int = -1) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


# ----------------------------------------------------------------------------------------------- tokens


class _Kind(enum.Enum):
    NUMBER = "number"
    NAME = "name"
    OP = "operator"
    END = "end"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    text: str
    col: int
    value: Number = 0


_DIGITS: Final = frozenset("0123456789")  # not str.isdigit(): that accepts `²` and other scripts
_SPACE: Final = re.compile(r"[ \t\r\n\f\v]+")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT_SUFFIX: Final = r"(?:[uU](?:ll|LL|[lL])?|(?:ll|LL|[lL])[uU]?)?"
_NUMBER: Final = re.compile(
    rf"0[xX](?P<hex>[0-9a-fA-F]+){_INT_SUFFIX}"
    rf"|0[bB](?P<bin>[01]+){_INT_SUFFIX}"
    r"|(?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)[fFlL]?"
    rf"|(?P<dec>[0-9]+){_INT_SUFFIX}"
)
# A number immediately followed by one of these is malformed (`12abc`, `0x`, `1.2.3`, `1_000`).
_NUMBER_TAIL: Final = re.compile(r"[A-Za-z0-9_.]+")
# Longest first, so `<<` is never read as two `<`. `++`/`--` are tokens only to be rejected clearly.
# fmt: off
_OPERATORS: Final = ("<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++", "--",
                     "+", "-", "*", "/", "%", "<", ">", "&", "^", "|", "~", "!", "?", ":", "(", ")", ",")
# fmt: on


def _tokenize(text: str) -> list[_Token]:
    """Split ``text`` into tokens, rejecting any character that is not part of the expression language.

    Quotes, dots outside numbers, brackets, braces, ``=``, ``;`` and backslashes are rejected here, which
    is what makes strings, attribute access, indexing and statements impossible to even write.
    """
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        space = _SPACE.match(text, pos)
        if space:
            pos = space.end()
            continue
        ch = text[pos]
        if ch in _DIGITS or (ch == "." and text[pos + 1 : pos + 2] in _DIGITS):
            tokens.append(_number(text, pos))
            pos += len(tokens[-1].text)
            continue
        name = _NAME.match(text, pos)
        if name:
            tokens.append(_Token(_Kind.NAME, name.group(), pos))
            pos = name.end()
            continue
        op = next((op for op in _OPERATORS if text.startswith(op, pos)), None)
        if op is not None:
            tokens.append(_Token(_Kind.OP, op, pos))
            pos += len(op)
            continue
        raise ExprError(_bad_character(text, pos), pos, text)
    tokens.append(_Token(_Kind.END, "end of expression", len(text)))
    return tokens


def _bad_character(text: str, pos: int) -> str:
    ch = text[pos]
    if ch == "=":
        return "`=` is not an operator here (assignment is not allowed; did you mean `==`?)"
    if ch == ".":
        return "unexpected `.`: attribute access is not allowed (numbers need a digit next to the `.`)"
    if ch in "'\"":
        return f"unexpected `{ch}`: strings and character literals are not allowed"
    if ch in "[]{}":
        return f"unexpected `{ch}`: only numbers, names, operators, parentheses and calls are allowed"
    shown = ch if ch.isprintable() else repr(ch)
    return f"unexpected character `{shown}`"


def _number(text: str, pos: int) -> _Token:
    """Read one numeric literal at ``pos``: an exact int or a float, following C's spelling rules."""
    match = _NUMBER.match(text, pos)
    if match is None:  # pragma: no cover - the caller only calls at a digit or `.digit`
        raise ExprError("malformed number", pos, text)
    tail = _NUMBER_TAIL.match(text, match.end())
    if tail:
        bad = text[pos : tail.end()]
        hint = ""
        if match.group("dec") is not None and tail.group()[0] in "fF":
            hint = f" (a float literal needs a `.` or an exponent, e.g. `{match.group('dec')}.0f`)"
        raise ExprError(f"malformed number `{bad}`{hint}", pos, text)
    spelled = match.group()
    value: Number
    if match.group("hex") is not None:
        value = int(match.group("hex"), 16)
    elif match.group("bin") is not None:
        value = int(match.group("bin"), 2)
    elif match.group("float") is not None:
        value = float(match.group("float"))
        if not math.isfinite(value):
            raise ExprError(f"number `{spelled}` is out of range for a floating-point value", pos, text)
    else:
        digits = match.group("dec")
        if len(digits) > 1 and digits.startswith("0"):
            # C reads `010` as octal 8; a human writing a size almost certainly meant 10. Neither
            # reading is safe to pick silently.
            raise ExprError(
                f"`{spelled}` has a leading zero, which C reads as octal; write it without the zero "
                "(or use 0x/0b for other bases)",
                pos,
                text,
            )
        value = int(digits)
    if isinstance(value, int) and value > MAX_MAGNITUDE:
        raise ExprError(f"value out of range: `{spelled}` is larger than 2**64", pos, text)
    return _Token(_Kind.NUMBER, spelled, pos, value)


# -------------------------------------------------------------------------------------------------- AST


@dataclass(frozen=True, slots=True)
class _Num:
    value: Number
    col: int


@dataclass(frozen=True, slots=True)
class _Name:
    name: str
    col: int


@dataclass(frozen=True, slots=True)
class _Unary:
    op: str
    operand: _Node
    col: int


@dataclass(frozen=True, slots=True)
class _Cast:
    type_name: str
    operand: _Node
    col: int


@dataclass(frozen=True, slots=True)
class _Binary:
    op: str
    left: _Node
    right: _Node
    col: int


@dataclass(frozen=True, slots=True)
class _Cond:
    cond: _Node
    then: _Node
    other: _Node
    col: int


@dataclass(frozen=True, slots=True)
class _Call:
    func: str
    args: tuple[_Node, ...]
    col: int


_Node: TypeAlias = _Num | _Name | _Unary | _Cast | _Binary | _Cond | _Call


# ------------------------------------------------------------------------------------------------ parser

# Binding powers, higher binds tighter; the C precedence table from `||` up to `* / %`.
_BINARY_BP: Final[Mapping[str, int]] = MappingProxyType(
    {
        "||": 2,
        "&&": 3,
        "|": 4,
        "^": 5,
        "&": 6,
        "==": 7,
        "!=": 7,
        "<": 8,
        "<=": 8,
        ">": 8,
        ">=": 8,
        "<<": 9,
        ">>": 9,
        "+": 10,
        "-": 10,
        "*": 11,
        "/": 11,
        "%": 11,
    }
)
_TERNARY_BP: Final = 1
_UNARY_BP: Final = 12
_UNARY_OPS: Final = frozenset({"-", "+", "~", "!"})


class _Parser:
    """Precedence-climbing (Pratt) parser over the token list of one expression.

    Every descent into a sub-expression goes through :meth:`_sub`, which counts depth, so the Python
    recursion this parser uses is bounded by a small multiple of :data:`MAX_DEPTH` whatever the input.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0
        self.depth = 0
        self.names: set[str] = set()

    # -- helpers

    def _error(self, message: str, col: int) -> ExprError:
        return ExprError(message, col, self.text)

    def _peek(self, offset: int = 0) -> _Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def _next(self) -> _Token:
        tok = self.tokens[self.pos]
        if tok.kind is not _Kind.END:
            self.pos += 1
        return tok

    def _at(self, op: str, offset: int = 0) -> bool:
        tok = self._peek(offset)
        return tok.kind is _Kind.OP and tok.text == op

    def _close(self, opening: _Token, what: str = "`(`") -> None:
        tok = self._next()
        if tok.kind is _Kind.OP and tok.text == ")":
            return
        if tok.kind is _Kind.END:
            raise self._error(f"missing `)` to close the {what} at column {opening.col}", tok.col)
        message = f"expected `)` to close the {what} at column {opening.col}, found `{tok.text}`"
        raise self._error(message, tok.col)

    def _sub(self, min_bp: int, at: _Token) -> _Node:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise self._error(f"expression is nested too deeply (more than {MAX_DEPTH} levels)", at.col)
            return self._expression(min_bp)
        finally:
            self.depth -= 1

    # -- grammar

    def parse(self) -> _Node:
        if self._peek().kind is _Kind.END:
            raise self._error("empty expression", 0)
        node = self._expression(0)
        tok = self._peek()
        if tok.kind is not _Kind.END:
            if tok.text == ")":
                raise self._error("unmatched `)`", tok.col)
            raise self._error(f"unexpected `{tok.text}` after a complete expression", tok.col)
        return node

    def _expression(self, min_bp: int) -> _Node:
        left = self._prefix()
        while True:
            tok = self._peek()
            if tok.kind is not _Kind.OP:
                return left
            if tok.text == "?":
                if min_bp > _TERNARY_BP:
                    return left
                self._next()
                then = self._sub(0, tok)
                colon = self._next()
                if not (colon.kind is _Kind.OP and colon.text == ":"):
                    found = "the end" if colon.kind is _Kind.END else f"`{colon.text}`"
                    message = f"expected `:` for the `?` at column {tok.col}, found {found}"
                    raise self._error(message, colon.col)
                other = self._sub(_TERNARY_BP, colon)  # same power again: `?:` is right-associative
                left = _Cond(left, then, other, tok.col)
                continue
            bp = _BINARY_BP.get(tok.text)
            if bp is None or bp < min_bp:
                return left
            self._next()
            if tok.text == "*" and self._at("*") and self._peek().col == tok.col + 1:
                raise self._error(
                    "`**` is not an operator in C (multiply explicitly, or use `1 << k` for 2**k)", tok.col
                )
            right = self._sub(bp + 1, tok)  # +1: every binary operator is left-associative
            left = _Binary(tok.text, left, right, tok.col)

    def _prefix(self) -> _Node:
        tok = self._next()
        if tok.kind is _Kind.NUMBER:
            return _Num(tok.value, tok.col)
        if tok.kind is _Kind.NAME:
            return self._name(tok)
        if tok.kind is _Kind.END:
            raise self._error("the expression ends where a value was expected", tok.col)
        if tok.text in _UNARY_OPS:
            return _Unary(tok.text, self._sub(_UNARY_BP, tok), tok.col)
        if tok.text == "(":
            type_name = self._cast_type()
            if type_name is not None:
                return _Cast(type_name, self._sub(_UNARY_BP, tok), tok.col)
            inner = self._sub(0, tok)
            self._close(tok)
            return inner
        if tok.text in ("++", "--"):
            raise self._error(f"`{tok.text}` (increment/decrement) is not allowed in expressions", tok.col)
        if tok.text == ")":
            raise self._error("expected a value, found `)`", tok.col)
        raise self._error(f"expected a value, found `{tok.text}`", tok.col)

    def _name(self, tok: _Token) -> _Node:
        if tok.text == "sizeof":
            return self._sizeof(tok)
        if self._at("("):
            return self._call(tok)
        if tok.text in _TYPE_KEYWORDS:
            raise self._error(
                f"`{tok.text}` is a type, not a value; use it in a cast like `({tok.text})x` "
                f"or in `sizeof({tok.text})`",
                tok.col,
            )
        self.names.add(tok.text)
        return _Name(tok.text, tok.col)

    def _type_words(self) -> tuple[str, int]:
        """Count the run of names at the cursor and join them, e.g. ``unsigned long long``."""
        count = 0
        while self._peek(count).kind is _Kind.NAME:
            count += 1
        return " ".join(self._peek(i).text for i in range(count)), count

    def _cast_type(self) -> str | None:
        """After a `(`: if a cast type and `)` follow, consume them and return the type name."""
        type_name, count = self._type_words()
        if count == 0 or not self._at(")", count):
            return None  # a parenthesised expression; a stray type keyword is reported by _name
        first = self._peek()
        if type_name in _INT_TYPES or type_name in _FLOAT_TYPES:
            self.pos += count + 1
            return type_name
        if type_name in SIZEOF:
            raise self._error(
                f"cannot cast to `{type_name}`: casts may only name integer types, float or double",
                first.col,
            )
        if first.text in _TYPE_KEYWORDS:
            raise self._error(f"unknown type `{type_name}` in cast", first.col)
        return None

    def _sizeof(self, tok: _Token) -> _Node:
        opening = self._next()
        if not (opening.kind is _Kind.OP and opening.text == "("):
            raise self._error("`sizeof` needs a type in parentheses, e.g. `sizeof(float)`", tok.col)
        type_name, count = self._type_words()
        first = self._peek()
        if count == 0:
            raise self._error("expected a type name inside `sizeof(...)`, e.g. `sizeof(float)`", first.col)
        self.pos += count
        pointer = False
        while self._at("*"):
            self._next()
            pointer = True
        if type_name not in SIZEOF and not (pointer and type_name == "void"):
            raise self._error(
                f"`sizeof` does not know the type `{type_name}` (known: {_KNOWN_TYPES})",
                first.col,
            )
        self._close(opening, "`sizeof(`")
        return _Num(_POINTER_SIZE if pointer else SIZEOF[type_name], tok.col)

    def _call(self, tok: _Token) -> _Node:
        func = FUNCTIONS.get(tok.text)
        if func is None:
            allowed = ", ".join(sorted(FUNCTIONS))
            raise self._error(f"unknown function `{tok.text}` (allowed: {allowed})", tok.col)
        opening = self._next()
        args: list[_Node] = []
        if not self._at(")"):
            args.append(self._sub(0, opening))
            while self._at(","):
                self._next()
                args.append(self._sub(0, opening))
        self._close(opening, f"`{tok.text}(`")
        if len(args) < func.min_args or (func.max_args is not None and len(args) > func.max_args):
            message = f"`{tok.text}` takes {func.arity} (`{func.signature}`), got {len(args)}"
            raise self._error(message, tok.col)
        return _Call(tok.text, tuple(args), tok.col)


# ---------------------------------------------------------------------------------------------- runtime


def _checked(value: Number) -> Number:
    """Enforce the magnitude bound on every intermediate value, so no step can build a huge number."""
    if isinstance(value, int):
        if abs(value) > MAX_MAGNITUDE:
            raise _Fail("value out of range: integers in specs must stay within ±2**64")
    elif not math.isfinite(value):
        raise _Fail("value out of range: the result is not a finite number")
    return value


def _c_div(a: int, b: int) -> int:
    """C integer division: the quotient truncated toward zero (Python's `//` floors instead)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _require_ints(what: str, *values: Number) -> tuple[int, ...]:
    for value in values:
        if not isinstance(value, int):
            raise _Fail(f"{what} needs integer operands, got {value!r}")
    return tuple(int(v) for v in values)


def _binary(op: str, a: Number, b: Number) -> Number:
    """Apply a non-short-circuit binary operator with C semantics on exact Python numbers."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise _Fail("division by zero")
        if isinstance(a, int) and isinstance(b, int):
            return _c_div(a, b)
        return a / b
    if op == "%":
        x, y = _require_ints("`%`", a, b)
        if y == 0:
            raise _Fail("modulo by zero")
        return x - y * _c_div(x, y)  # the remainder takes the sign of the dividend, as in C
    if op in ("<<", ">>"):
        x, y = _require_ints(f"`{op}`", a, b)
        if not 0 <= y <= MAX_SHIFT:
            raise _Fail(f"shift amount {y} is outside 0..{MAX_SHIFT}")
        return x << y if op == "<<" else x >> y
    if op in ("&", "|", "^"):
        x, y = _require_ints(f"`{op}`", a, b)
        return x & y if op == "&" else x | y if op == "|" else x ^ y
    if op == "<":
        return int(a < b)
    if op == "<=":
        return int(a <= b)
    if op == ">":
        return int(a > b)
    if op == ">=":
        return int(a >= b)
    if op == "==":
        return int(a == b)
    if op == "!=":
        return int(a != b)
    raise AssertionError(f"unhandled operator {op}")  # pragma: no cover - the parser only builds these


def _unary(op: str, a: Number) -> Number:
    if op == "-":
        return -a
    if op == "+":
        return a
    if op == "!":
        return int(a == 0)
    (x,) = _require_ints("`~`", a)
    return ~x


def _cast(type_name: str, a: Number) -> Number:
    if type_name in _FLOAT_TYPES:
        return float(a)
    if type_name == "bool":
        return int(a != 0)
    if isinstance(a, float):
        if not math.isfinite(a):  # pragma: no cover - non-finite floats are rejected before this
            raise _Fail(f"cannot convert {a} to `{type_name}`")
        return int(a)  # truncates toward zero, like a C cast
    return a


def _lookup(name: str, env: Mapping[str, Number]) -> Number:
    try:
        raw: object = env[name]
    except KeyError:
        known = sorted(str(key) for key in env)
        listed = ", ".join(known[:30]) + (", ..." if len(known) > 30 else "") if known else "none"
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise _Fail(f"unknown name `{name}` (known: {listed}{hint})") from None
    value: Number
    if isinstance(raw, bool):
        value = int(raw)
    elif isinstance(raw, int | float):
        value = raw
    elif isinstance(raw, numbers.Integral):  # numpy integers and friends
        value = int(raw)
    elif isinstance(raw, numbers.Real):
        value = float(raw)
    else:
        raise _Fail(f"`{name}` is a {type(raw).__name__}, not a number")
    try:
        return _checked(value)
    except _Fail as fail:
        raise _Fail(f"{fail.message} (the value of `{name}`)") from None


# ---------------------------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class _Function:
    signature: str
    min_args: int
    max_args: int | None
    apply: Callable[[Sequence[Number]], Number]

    @property
    def arity(self) -> str:
        if self.max_args is None:
            return f"{self.min_args} or more arguments"
        return f"{self.min_args} argument" + ("" if self.min_args == 1 else "s")


def _extreme(pick: Callable[[Sequence[Number]], Number]) -> Callable[[Sequence[Number]], Number]:
    def apply(args: Sequence[Number]) -> Number:
        # Mixed int/float arguments give a float, as C's usual arithmetic conversions would.
        result = pick(args)
        return float(result) if any(isinstance(a, float) for a in args) else result

    return apply


def _ceil_div(args: Sequence[Number]) -> Number:
    a, b = _require_ints("ceiling division", *args)
    if b == 0:
        raise _Fail("division by zero")
    return -(-a // b)


def _sqrt(args: Sequence[Number]) -> Number:
    if args[0] < 0:
        raise _Fail(f"`sqrt` of a negative number ({args[0]!r})")
    return math.sqrt(args[0])


def _log2(args: Sequence[Number]) -> Number:
    x = args[0]
    if x <= 0:
        raise _Fail(f"`log2` needs a positive number, got {x!r}")
    if isinstance(x, int) and x & (x - 1) == 0:
        return x.bit_length() - 1  # exact for powers of two, so `log2(N)` can drive integer sizes
    return math.log2(x)


FUNCTIONS: Final[Mapping[str, _Function]] = MappingProxyType(
    {
        "min": _Function("min(a, b, ...)", 2, None, _extreme(min)),
        "max": _Function("max(a, b, ...)", 2, None, _extreme(max)),
        "cdiv": _Function("cdiv(a, b)", 2, 2, _ceil_div),
        "ceil_div": _Function("ceil_div(a, b)", 2, 2, _ceil_div),
        "abs": _Function("abs(x)", 1, 1, lambda args: abs(args[0])),
        "sqrt": _Function("sqrt(x)", 1, 1, _sqrt),
        "log2": _Function("log2(x)", 1, 1, _log2),
        # C's: a double result, so `(int)ceil((float)N / 32)`, the way host code often sizes a grid, means
        # what it means there
        "ceil": _Function("ceil(x)", 1, 1, lambda args: float(math.ceil(args[0]))),
        "floor": _Function("floor(x)", 1, 1, lambda args: float(math.floor(args[0]))),
    }
)
"""The only functions an expression may call."""


# --------------------------------------------------------------------------------------------- evaluator


class _Step(enum.Enum):
    EVAL = enum.auto()  # push the node's value (or schedule its children)
    APPLY = enum.auto()  # children are on the value stack: combine them
    LOGIC = enum.auto()  # left side of && / || is on the stack: decide whether to evaluate the right
    TRUTH = enum.auto()  # turn the right side of && / || into 0/1
    BRANCH = enum.auto()  # condition of ?: is on the stack: evaluate one branch


def _run(root: _Node, env: Mapping[str, Number]) -> Number:
    """Evaluate the AST with an explicit stack.

    A left-leaning chain like ``1+1+...+1`` fits in MAX_LENGTH characters yet is ~1000 nodes deep, more
    than Python's recursion limit, so the evaluator does not recurse.
    """
    values: list[Number] = []
    todo: list[tuple[_Step, _Node]] = [(_Step.EVAL, root)]
    while todo:
        step, node = todo.pop()
        try:
            _step(step, node, env, values, todo)
        except _Fail as fail:
            raise _Fail(fail.message, node.col if fail.column < 0 else fail.column) from None
        except ArithmeticError as exc:  # pragma: no cover - bounds above should make this unreachable
            raise _Fail(f"arithmetic error: {exc}", node.col) from None
    (result,) = values
    return result


def _step(
    step: _Step,
    node: _Node,
    env: Mapping[str, Number],
    values: list[Number],
    todo: list[tuple[_Step, _Node]],
) -> None:
    if step is _Step.EVAL:
        if isinstance(node, _Num):
            values.append(node.value)
        elif isinstance(node, _Name):
            values.append(_lookup(node.name, env))
        elif isinstance(node, _Unary | _Cast):
            todo += [(_Step.APPLY, node), (_Step.EVAL, node.operand)]
        elif isinstance(node, _Binary):
            if node.op in ("&&", "||"):
                todo += [(_Step.LOGIC, node), (_Step.EVAL, node.left)]
            else:  # left is popped (evaluated) first, so errors are reported left to right
                todo += [(_Step.APPLY, node), (_Step.EVAL, node.right), (_Step.EVAL, node.left)]
        elif isinstance(node, _Cond):
            todo += [(_Step.BRANCH, node), (_Step.EVAL, node.cond)]
        else:
            todo.append((_Step.APPLY, node))
            todo += [(_Step.EVAL, arg) for arg in reversed(node.args)]
    elif step is _Step.APPLY:
        if isinstance(node, _Unary):
            values.append(_checked(_unary(node.op, values.pop())))
        elif isinstance(node, _Cast):
            values.append(_checked(_cast(node.type_name, values.pop())))
        elif isinstance(node, _Binary):
            right = values.pop()
            left = values.pop()
            values.append(_checked(_binary(node.op, left, right)))
        elif isinstance(node, _Call):
            args = values[len(values) - len(node.args) :]
            del values[len(values) - len(node.args) :]
            values.append(_checked(FUNCTIONS[node.func].apply(args)))
    elif step is _Step.LOGIC and isinstance(node, _Binary):
        left = values.pop()
        if node.op == "&&" and left == 0:
            values.append(0)
        elif node.op == "||" and left != 0:
            values.append(1)
        else:
            todo += [(_Step.TRUTH, node), (_Step.EVAL, node.right)]
    elif step is _Step.TRUTH:
        values.append(int(values.pop() != 0))
    elif step is _Step.BRANCH and isinstance(node, _Cond):
        todo.append((_Step.EVAL, node.then if values.pop() != 0 else node.other))


# -------------------------------------------------------------------------------------------------- API


@dataclass(frozen=True)
class Expr:
    """A parsed, immutable expression: parse once, evaluate against many size environments.

    Constructing ``Expr(text)`` parses ``text`` (raising :class:`ExprError`), so an ``Expr`` always
    holds a valid AST. Equality and hashing use the text only.
    """

    text: str
    _root: _Node = field(init=False, repr=False, compare=False)
    _names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"expression text must be a str, not {type(self.text).__name__}")
        if len(self.text) > MAX_LENGTH:
            raise ExprError(
                f"expression is too long ({len(self.text)} characters; the limit is {MAX_LENGTH})",
                -1,
                self.text,
            )
        parser = _Parser(self.text)
        object.__setattr__(self, "_root", parser.parse())
        object.__setattr__(self, "_names", frozenset(parser.names))

    def names(self) -> frozenset[str]:
        """Free identifiers, i.e. what ``env`` must provide; function names and types are not included.

        Names in branches that a given environment would skip are included too, so callers can check a
        spec for undefined sizes without evaluating it.
        """
        return self._names

    def divisions(self, env: Mapping[str, Number]) -> list[tuple[Number, Number]]:
        """Every ``a / b`` in the expression as (a, b) evaluated in ``env``, outermost first; one whose operands
        do not evaluate there (a branch not taken, a name missing) is left out. Why: a launch written
        ``grid = N / 256`` (not rounded up) says the author's sizes are whole blocks (``KernelSpec``)."""
        out: list[tuple[Number, Number]] = []
        todo: list[_Node] = [self._root]
        while todo:
            n = todo.pop()
            if isinstance(n, _Binary):
                if n.op == "/":
                    with contextlib.suppress(_Fail):
                        out.append((_run(n.left, env), _run(n.right, env)))
                todo.extend((n.right, n.left))
            elif isinstance(n, (_Unary, _Cast)):
                todo.append(n.operand)
            elif isinstance(n, _Cond):
                todo.extend((n.other, n.then, n.cond))
            elif isinstance(n, _Call):
                todo.extend(reversed(n.args))
        return out

    def evaluate(self, env: Mapping[str, Number]) -> Number:
        """Compute the value with the sizes in ``env``; raises :class:`ExprError` located at the culprit."""
        try:
            return _run(self._root, env)
        except _Fail as fail:
            raise ExprError(fail.message, fail.column, self.text) from None


@functools.lru_cache(maxsize=1024)
def _parse_cached(text: str) -> Expr:
    return Expr(text)


def parse(text: str) -> Expr:
    """Parse ``text``; raises :class:`ExprError` with the column of the first syntax error.

    Results are cached: the same spec expressions are evaluated for every size and tunable variant, and
    an :class:`Expr` is immutable, so sharing one is safe.
    """
    return _parse_cached(text)


def evaluate(text: str, env: Mapping[str, Number] | None = None) -> Number:
    """Parse and evaluate ``text`` in one step (``env`` defaults to no names at all)."""
    return parse(text).evaluate({} if env is None else env)


def is_constant(text: str) -> bool:
    """Whether ``text`` parses and names no variables, i.e. its value cannot depend on the sizes.

    Invalid text is not constant (and does not raise): callers use this to decide how to treat an
    expression, and report syntax errors where they parse it for real.
    """
    try:
        return not parse(text).names()
    except ExprError:
        return False
