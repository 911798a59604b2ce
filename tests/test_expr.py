"""Tests for the spec expression evaluator: C semantics, literals, errors with columns, and safety."""

from __future__ import annotations

import pickle
import random

import pytest

from warpforge.spec.expr import (
    FUNCTIONS,
    MAX_DEPTH,
    MAX_LENGTH,
    SIZEOF,
    Expr,
    ExprError,
    Number,
    evaluate,
    is_constant,
    parse,
)


def same(got: Number, want: Number) -> bool:
    """Equal value *and* type: `4` and `4.0` are different answers for a buffer size."""
    return type(got) is type(want) and got == want


def error(text: str, env: dict[str, Number] | None = None) -> ExprError:
    with pytest.raises(ExprError) as info:
        evaluate(text, env)
    assert info.value.text == text
    return info.value


# ----------------------------------------------------------------------------------- spec-style examples


@pytest.mark.parametrize(
    ("text", "env", "want"),
    [
        ("(n + 255) / 256", {"n": 1000}, 4),
        ("(n + 255) / 256", {"n": 1024}, 4),
        ("(n + 255) / 256", {"n": 1025}, 5),
        ("B*T*C", {"B": 8, "T": 1024, "C": 768}, 8 * 1024 * 768),
        ("1 << 24", {}, 16777216),
        ("cdiv(N, BLOCK)", {"N": 1000, "BLOCK": 256}, 4),
        ("ceil_div(N, BLOCK)", {"N": 1024, "BLOCK": 256}, 4),
        ("N * sizeof(float)", {"N": 1000}, 4000),
        ("min(a, 1024)", {"a": 5000}, 1024),
        ("min(a, 1024)", {"a": 7}, 7),
        ("x > 0 ? x : 1", {"x": 9}, 9),
        ("x > 0 ? x : 1", {"x": -3}, 1),
        ("4096u", {}, 4096),
        ("0x100", {}, 256),
        ("1e-5f", {}, 1e-5),
        ("2.5", {}, 2.5),
    ],
)
def test_spec_examples(text: str, env: dict[str, Number], want: Number) -> None:
    assert same(evaluate(text, env), want)


# ------------------------------------------------------------------------------ precedence, associativity


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),  # left-associative
        ("100 / 10 / 5", 2),
        ("2 * 3 % 4", 2),  # (2*3)%4, same level, left to right
        ("7 - 2 * 3 + 1", 2),
        ("1 << 2 + 1", 8),  # + binds tighter than <<
        ("256 >> 2 >> 1", 32),
        ("1 + 2 < 4", 1),  # arithmetic before comparison
        ("3 < 2 == 0", 1),  # relational before equality
        ("1 | 2 ^ 3 & 1", 3),  # & before ^ before |
        ("6 & 3 == 2", 0),  # == before &, so 6 & (3 == 2)
        ("1 || 0 && 0", 1),  # && before ||
        ("0 && 1 || 1", 1),
        ("-2 * 3", -6),
        ("-2 << 1", -4),  # unary before shift
        ("- -3", 3),
        ("!0 + 1", 2),
        ("~0", -1),
        ("~5 & 0xF", 10),
        ("!!7", 1),
        ("+4", 4),
        ("2 * -3", -6),
        ("1 ? 2 : 3 ? 4 : 5", 2),  # right-associative ?:
        ("0 ? 2 : 0 ? 4 : 5", 5),
        ("0 ? 2 : 1 ? 4 : 5", 4),
        ("1 ? 0 ? 6 : 7 : 8", 7),
        ("1 + 1 ? 10 : 20", 10),  # ?: binds loosest
        ("0 || 0 ? 10 : 20", 20),
        ("1 ? 2 : 3 + 100", 2),
        ("0 ? 2 : 3 + 100", 103),
        ("((((((((7))))))))", 7),
        ("1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10", 55),
    ],
)
def test_precedence_and_associativity(text: str, want: int) -> None:
    assert same(evaluate(text), want)


def test_long_flat_chain_is_not_limited_by_nesting() -> None:
    # ~900 nodes deep as an AST, deeper than Python's recursion limit: evaluation must be iterative.
    text = "+".join(["1"] * 900)
    assert len(text) < MAX_LENGTH
    assert evaluate(text) == 900
    assert evaluate("-".join(["1"] * 900)) == 1 - 899


# ---------------------------------------------------------------------------------- C integer semantics


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("7 / 2", 3),
        ("-7 / 2", -3),  # truncates toward zero, not -4 as Python's //
        ("7 / -2", -3),
        ("-7 / -2", 3),
        ("7 % 3", 1),
        ("-7 % 3", -1),  # remainder has the sign of the dividend
        ("7 % -3", 1),
        ("-7 % -3", -1),
        ("-8 % 4", 0),
        ("(-7 / 2) * 2 + (-7 % 2)", -7),  # C's identity (a/b)*b + a%b == a
        ("1 / 2", 0),
        ("7.0 / 2", 3.5),  # a float on either side gives true division
        ("7 / 2.0", 3.5),
        ("-7 / 2.0", -3.5),
        ("3 + 0.5", 3.5),
        ("2 * 1.5", 3.0),
        ("1 < 2", 1),
        ("2 <= 2", 1),
        ("3 > 4", 0),
        ("4 >= 5", 0),
        ("2 == 2.0", 1),
        ("2 != 2", 0),
        ("0.5 && 2", 1),
        ("0.0 || 0", 0),
        ("!2.5", 0),
        ("5 & 3", 1),
        ("5 | 3", 7),
        ("5 ^ 3", 6),
        ("1 << 63", 2**63),
        ("-1 >> 1", -1),  # arithmetic shift, as gcc/nvcc do for signed ints
        ("0xFFFFFFFF + 1", 2**32),  # no 32-bit wraparound: sizes are mathematical integers
        ("-(1 << 63) * 2", -(2**64)),  # exactly at the bound is fine
    ],
)
def test_c_arithmetic(text: str, want: Number) -> None:
    assert same(evaluate(text), want)


def test_logical_operators_short_circuit() -> None:
    # The side not taken is never evaluated, so guarded divisions and missing names are fine.
    assert same(evaluate("n != 0 && 100 / n > 1", {"n": 0}), 0)
    assert same(evaluate("n == 0 || 100 / n > 1", {"n": 0}), 1)
    assert same(evaluate("n > 0 ? 100 / n : 0", {"n": 0}), 0)
    assert same(evaluate("n > 0 ? 100 / n : missing", {"n": 4}), 25)
    assert same(evaluate("0 && undefined_name"), 0)
    assert same(evaluate("1 || undefined_name"), 1)
    # ...but the side that is taken is, and its errors surface.
    assert "unknown name `undefined_name`" in error("1 && undefined_name").message


# ------------------------------------------------------------------------------------------ literals


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0", 0),
        ("42", 42),
        ("4096u", 4096),
        ("4096U", 4096),
        ("10l", 10),
        ("10L", 10),
        ("10ul", 10),
        ("10UL", 10),
        ("10lu", 10),
        ("10ull", 10),
        ("10ULL", 10),
        ("10llu", 10),
        ("10LL", 10),
        ("0x100", 256),
        ("0XfF", 255),
        ("0x1f", 31),  # `f` is a hex digit here, not a float suffix
        ("0xFFu", 255),
        ("0b1011", 11),
        ("0B11ull", 3),
        ("18446744073709551616", 2**64),
        ("2.5", 2.5),
        ("2.5f", 2.5),
        ("2.5F", 2.5),
        ("1.", 1.0),
        (".5", 0.5),
        ("0.5", 0.5),
        ("1e3", 1000.0),
        ("1E3", 1000.0),
        ("1e-5f", 1e-5),
        ("1.5e+2", 150.0),
        ("3.f", 3.0),
        ("1e3L", 1000.0),
        ("  7\t\n", 7),
    ],
)
def test_literals(text: str, want: Number) -> None:
    assert same(evaluate(text), want)


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("12abc", 0, "malformed number `12abc`"),
        ("0x", 0, "malformed number `0x`"),
        ("0xg", 0, "malformed number"),
        ("0b102", 0, "malformed number `0b102`"),
        ("1.2.3", 0, "malformed number `1.2.3`"),
        ("1_000", 0, "malformed number"),
        ("1e", 0, "malformed number `1e`"),
        ("1f", 0, "`1.0f`"),
        ("10lul", 0, "malformed number"),
        ("2 + 010", 4, "octal"),
        ("1e999", 0, "out of range"),
        ("18446744073709551617", 0, "value out of range"),
    ],
)
def test_bad_literals(text: str, column: int, fragment: str) -> None:
    err = error(text)
    assert err.column == column
    assert fragment in err.message


# ----------------------------------------------------------------------------------------------- casts


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("(int)2.7", 2),
        ("(int)-2.7", -2),  # toward zero, not floor
        ("(int)7", 7),
        ("(unsigned)3.9", 3),
        ("(unsigned int)3.9", 3),
        ("(size_t)1e3", 1000),
        ("(long long)2.5", 2),
        ("(unsigned long long)4.5", 4),
        ("(int64_t)5.5", 5),
        ("( long )9.9", 9),
        ("(bool)5", 1),
        ("(bool)0.0", 0),
        ("(float)3", 3.0),
        ("(double)1 / 2", 0.5),  # the cast binds tighter than `/`
        ("(float)(1 / 2)", 0.0),  # ...so parentheses decide what is cast
        ("(int)2.5 * 2", 4),
        ("(int)(2.5 * 2)", 5),
        ("-(int)2.5", -2),
        ("(int)-x", -3),
    ],
)
def test_casts(text: str, want: Number) -> None:
    assert same(evaluate(text, {"x": 3.5}), want)


def test_parenthesised_name_is_not_a_cast() -> None:
    assert same(evaluate("(N) * 2", {"N": 21}), 42)
    assert parse("(N) - 1").names() == frozenset({"N"})


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("(half)x", 1, "cannot cast to `half`"),
        ("(float4)x", 1, "cannot cast to `float4`"),
        ("(long float)x", 1, "unknown type `long float`"),
        ("int + 1", 0, "`int` is a type, not a value"),
        ("(float)", 7, "value was expected"),
    ],
)
def test_bad_casts(text: str, column: int, fragment: str) -> None:
    err = error(text, {"x": 1})
    assert err.column == column
    assert fragment in err.message


# ---------------------------------------------------------------------------------------------- sizeof


@pytest.mark.parametrize(
    ("type_name", "size"),
    [
        ("float", 4),
        ("double", 8),
        ("half", 2),
        ("__half", 2),
        ("__nv_bfloat16", 2),
        ("bfloat16", 2),
        ("int", 4),
        ("unsigned", 4),
        ("unsigned int", 4),
        ("long", 8),  # LP64: long is 8 bytes on Linux
        ("long long", 8),
        ("size_t", 8),
        ("short", 2),
        ("char", 1),
        ("int8_t", 1),
        ("uint8_t", 1),
        ("int16_t", 2),
        ("uint16_t", 2),
        ("int32_t", 4),
        ("uint32_t", 4),
        ("int64_t", 8),
        ("uint64_t", 8),
        ("float2", 8),
        ("float4", 16),
        ("int2", 8),
        ("int4", 16),
        ("float*", 8),
        ("void *", 8),
        ("char**", 8),
    ],
)
def test_sizeof(type_name: str, size: int) -> None:
    assert same(evaluate(f"sizeof({type_name})"), size)


def test_sizeof_in_expressions_and_names() -> None:
    expr = parse("N * sizeof(float4) + M * sizeof(unsigned long long)")
    assert expr.names() == frozenset({"N", "M"})  # neither the type nor `sizeof` is a free name
    assert same(expr.evaluate({"N": 10, "M": 3}), 10 * 16 + 3 * 8)
    assert same(evaluate("sizeof ( double ) * 2"), 16)


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("sizeof(foo)", 7, "does not know the type `foo`"),
        ("sizeof(N + 1)", 7, "does not know the type `N`"),
        ("sizeof(float + 1)", 13, "expected `)` to close the `sizeof(`"),
        ("sizeof float", 0, "needs a type in parentheses"),
        ("sizeof()", 7, "expected a type name"),
        ("sizeof(float", 12, "missing `)`"),
    ],
)
def test_bad_sizeof(text: str, column: int, fragment: str) -> None:
    err = error(text, {"N": 1})
    assert err.column == column
    assert fragment in err.message


# ------------------------------------------------------------------------------------------- functions


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("min(3, 5)", 3),
        ("min(9, 4, 7, 5)", 4),
        ("max(3, 5)", 5),
        ("max(-1, -8, -3)", -1),
        ("min(2, 3.5)", 2.0),  # mixed arguments promote to float, as in C
        ("max(2, 3.5)", 3.5),
        ("cdiv(1000, 256)", 4),
        ("cdiv(1024, 256)", 4),
        ("cdiv(1025, 256)", 5),
        ("cdiv(0, 256)", 0),
        ("cdiv(-5, 2)", -2),  # mathematical ceiling
        ("ceil_div(7, 7)", 1),
        ("abs(-5)", 5),
        ("abs(-2.5)", 2.5),
        ("sqrt(16)", 4.0),
        ("sqrt(2.25)", 1.5),
        ("log2(1024)", 10),  # exact int for powers of two
        ("log2(1)", 0),
        ("log2(8.0)", 3.0),
        ("1 << log2(64)", 64),
        ("max(min(a, 10), cdiv(a, 4))", 10),
        ("min((1 + 2) * 3, 4 << 1)", 8),
    ],
)
def test_functions(text: str, want: Number) -> None:
    assert same(evaluate(text, {"a": 30}), want)


def test_log2_of_non_power_of_two_is_float() -> None:
    result = evaluate("log2(1000)")
    assert isinstance(result, float)
    assert result == pytest.approx(9.965784284662087)


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("foo(1)", 0, "unknown function `foo` (allowed: abs, cdiv, ceil, ceil_div, floor, log2, max, min, sqrt)"),
        ("1 + pow(2, 3)", 4, "unknown function `pow`"),
        ("N(3)", 0, "unknown function `N`"),
        ("min(1)", 0, "`min` takes 2 or more arguments"),
        ("cdiv(1, 2, 3)", 0, "`cdiv` takes 2 arguments"),
        ("abs()", 0, "`abs` takes 1 argument"),
        ("min(1, )", 7, "expected a value, found `)`"),
        ("min(1, 2", 8, "missing `)` to close the `min(` at column 3"),
        ("cdiv(1, 0)", 0, "division by zero"),
        ("cdiv(2.5, 1)", 0, "needs integer operands"),
        ("sqrt(-1)", 0, "negative"),
        ("log2(0)", 0, "positive"),
    ],
)
def test_bad_function_calls(text: str, column: int, fragment: str) -> None:
    err = error(text, {"N": 1})
    assert err.column == column
    assert fragment in err.message


# ----------------------------------------------------------------------------------------------- names


def test_names() -> None:
    assert parse("(n + 255) / 256").names() == frozenset({"n"})
    assert parse("B*T*C").names() == frozenset({"B", "T", "C"})
    assert parse("cdiv(N, BLOCK) * sizeof(float)").names() == frozenset({"N", "BLOCK"})
    assert parse("(size_t)x > 0 ? y : z").names() == frozenset({"x", "y", "z"})  # untaken branches count
    assert parse("max(a, min(b, _c1))").names() == frozenset({"a", "b", "_c1"})
    assert parse("1 << 24").names() == frozenset()


def test_is_constant() -> None:
    assert is_constant("1 << 24")
    assert is_constant("cdiv(1000, 256) * sizeof(float)")
    assert is_constant("1 / 0")  # constant, even though evaluating it fails
    assert not is_constant("N * 2")
    assert not is_constant("(1 + ")  # invalid text is not constant, and does not raise


def test_expr_object() -> None:
    expr = parse("N * 2")
    assert expr == Expr("N * 2")
    assert hash(expr) == hash(Expr("N * 2"))
    assert expr.text == "N * 2"
    assert "N * 2" in repr(expr)
    assert parse("N * 2") is expr  # cached: the same immutable object
    with pytest.raises(AttributeError):
        expr.text = "0"  # type: ignore[misc]
    # One parse, many environments.
    assert [expr.evaluate({"N": n}) for n in (1, 2, 3)] == [2, 4, 6]


def test_environment_values() -> None:
    assert same(evaluate("N + 1", {"N": True}), 2)  # bool counts as int
    numpy = pytest.importorskip("numpy")
    assert same(evaluate("N / 2", {"N": numpy.int64(7)}), 3)  # numpy ints stay C integers
    assert same(evaluate("N / 2", {"N": numpy.float32(7)}), 3.5)
    err = error("N + 1", {"N": "7"})  # type: ignore[dict-item]
    assert "not a number" in err.message and err.column == 0
    err = error("N + 1", {"N": 2**65})
    assert "value out of range" in err.message and "`N`" in err.message


# ------------------------------------------------------------------------------------- errors, columns


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("", 0, "empty expression"),
        ("   ", 0, "empty expression"),
        ("(1 + 2", 6, "missing `)` to close the `(` at column 0"),
        ("((1 + 2)", 8, "missing `)`"),
        ("(1 + 2))", 7, "unmatched `)`"),
        (")", 0, "expected a value, found `)`"),
        ("()", 1, "expected a value, found `)`"),
        ("(1 2)", 3, "expected `)`"),
        ("1 2", 2, "unexpected `2` after a complete expression"),
        ("N M", 2, "unexpected `M`"),
        ("1 +", 3, "ends where a value was expected"),
        ("* 2", 0, "expected a value, found `*`"),
        ("1 + * 2", 4, "expected a value, found `*`"),
        ("a ? b", 5, "expected `:` for the `?` at column 2"),
        ("a ? b , c", 6, "expected `:`"),
        ("a : b", 2, "unexpected `:`"),
        ("1, 2", 1, "unexpected `,`"),
        ("2 ** 3", 2, "`**` is not an operator"),
        ("x = 1", 2, "did you mean `==`?"),
        ("--x", 0, "increment/decrement"),
        ("x++", 1, "unexpected `++`"),
        ("1 $ 2", 2, "unexpected character `$`"),
        ("n µ", 2, "unexpected character `µ`"),
        ("a[0]", 1, "unexpected `[`"),
    ],
)
def test_syntax_errors(text: str, column: int, fragment: str) -> None:
    with pytest.raises(ExprError) as info:
        parse(text)
    err = info.value
    assert err.column == column
    assert fragment in err.message
    assert err.text == text


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("M + 1", 0, "unknown name `M` (known: B, C"),
        ("B + Bx", 4, "unknown name `Bx` (known: B, C; did you mean `B`?)"),
        ("B / (C - 2)", 2, "division by zero"),
        ("B % 0", 2, "modulo by zero"),
        ("B / 0.0", 2, "division by zero"),
        ("7.5 % 2", 4, "`%` needs integer operands"),
        ("1 << 64", 2, "shift amount 64 is outside 0..63"),
        ("1 << -1", 2, "shift amount -1"),
        ("B >> 100", 2, "shift amount 100"),
        ("1.0 << 2", 4, "`<<` needs integer operands"),
        ("~1.5", 0, "`~` needs integer operands"),
        ("2.5 & 1", 4, "`&` needs integer operands"),
        ("(1 << 63) * 4", 10, "value out of range"),
        ("0xFFFFFFFFFFFFFFFF * 0xFFFFFFFFFFFFFFFF", 19, "value out of range"),
        ("(1 << 62) << 3", 10, "value out of range"),
        ("1e308 * 10", 6, "value out of range"),
        ("(int)1e300", 0, "value out of range"),
    ],
)
def test_evaluation_errors(text: str, column: int, fragment: str) -> None:
    expr = parse(text)  # these all parse; they fail only when evaluated
    with pytest.raises(ExprError) as info:
        expr.evaluate({"B": 1, "C": 2})
    err = info.value
    assert err.column == column
    assert fragment in err.message


def test_unknown_name_with_empty_environment() -> None:
    err = error("N")
    assert err.message == "unknown name `N` (known: none)"
    assert err.column == 0


def test_error_string_points_at_the_column() -> None:
    err = error("B / (C - 2)", {"B": 1, "C": 2})
    assert str(err) == "division by zero\n    B / (C - 2)\n      ^"
    assert isinstance(err, ValueError)


def test_error_survives_pickling() -> None:
    err = error("1 +")
    clone = pickle.loads(pickle.dumps(err))
    assert (clone.message, clone.column, clone.text) == (err.message, err.column, err.text)
    assert str(clone) == str(err)


# ---------------------------------------------------------------------------------------------- limits


def test_nesting_limit() -> None:
    ok = "(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH
    assert evaluate(ok) == 1
    too_deep = "(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1)
    err = error(too_deep)
    assert "nested too deeply" in err.message
    assert err.column == MAX_DEPTH  # the first `(` beyond the limit


@pytest.mark.parametrize(
    "text",
    [
        "- " * 150 + "1",
        "!" * 150 + "1",
        "min(" * 150 + "1" + ", 1)" * 150,
        "1 ? " * 150 + "1" + " : 0" * 150,
        "0 ? 0 : " * 150 + "1",
        "(int)" * 150 + "1",
        "1 + (" * 150 + "1" + ")" * 150,
    ],
)
def test_deep_nesting_of_every_kind_is_rejected_cleanly(text: str) -> None:
    assert len(text) <= MAX_LENGTH
    assert "nested too deeply" in error(text).message


def test_length_limit() -> None:
    text = "+".join(["1"] * 1001)
    assert len(text) > MAX_LENGTH
    err = error(text)
    assert "too long" in err.message
    assert err.column == -1
    assert not is_constant(text)


# ---------------------------------------------------------------------------------------------- safety


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os')",
        '__import__("os").system("true")',
        "__import__(1)",
        "os.system",
        "N.bit_length()",
        "().__class__",
        "[].__class__.__base__",
        "{}.keys",
        "open('/etc/passwd')",
        "eval('1')",
        "lambda: 0",
        "1 if 1 else 0",
        "x; y",
        "x == 1 and y",
        "`id`",
        "print(1)",
        "getattr(N, 'real')",
        "N.real",
        "\\x41",
    ],
)
def test_python_constructs_are_not_evaluated(text: str) -> None:
    env = {"N": 1, "x": 1, "y": 1, "os": 1}
    with pytest.raises(ExprError):
        evaluate(text, env)


def test_python_builtins_are_only_names() -> None:
    # Identifiers never resolve to anything but the caller's environment.
    err = error("len")
    assert err.message.startswith("unknown name `len`")
    assert evaluate("len", {"len": 3}) == 3


def test_function_and_type_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        FUNCTIONS["system"] = FUNCTIONS["abs"]  # type: ignore[index]
    with pytest.raises(TypeError):
        SIZEOF["float"] = 8  # type: ignore[index]


def test_random_token_soup_only_ever_raises_expr_error() -> None:
    # Whatever a user types, callers only need to handle ExprError (no IndexError, RecursionError, ...).
    rng = random.Random(0)
    pieces = ["1", "0", "-", "+", "*", "/", "%", "<<", ">>", "(", ")", "?", ":", "&&", "||", "!", "~",
              "N", "x", "min(", "cdiv(", ",", "sizeof(float)", "(int)", "2.5", "0x10", "1e3f", "<", "==",
              "&", "^", "|", " ", "63", "64", "(float)", "log2(", "sqrt(", "'", ".", "="]  # fmt: skip
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 20)))
        try:
            result = evaluate(text, {"N": 7, "x": -3.5})
        except ExprError as err:
            assert -1 <= err.column <= len(text)
        else:
            assert isinstance(result, int | float)
