"""The lint's lexer and preprocessor model: what is code, and how conditions evaluate per image."""

from __future__ import annotations

import re

import pytest

from farm.lint.lexer import strip_c, strip_directive_comments, strip_hash_comments, strip_python_comments
from farm.lint.preproc import ArchContext, Expr, Scope, directive_lines, evaluate, parse_expr, scan_directives
from farm.lint.rules import may_gate


def test_strip_c_blanks_comments_and_literals_and_keeps_positions() -> None:
    src = ('int a; // e4m3 "x"\n/* e5m2\n still */ const char* s = "e4m3 \\" q"; char c = \'"\';\n'
           'auto r = R"d(e4m3 ")d"; int b; // cont \\\n e4m3\nint z;\n')
    out = strip_c(src)
    assert len(out) == len(src)
    assert out.count("\n") == src.count("\n")
    assert "e4m3" not in out
    assert "e5m2" not in out
    assert 'const char* s = "' in out
    assert "int b;" in out
    assert "int z;" in out


def test_strip_hash_and_python_comments_keep_strings() -> None:
    src = 'set(X "a#b") # sm_90a\n'
    assert strip_hash_comments(src) == 'set(X "a#b")' + " " * 9 + "\n"
    out = strip_python_comments('flags = ["-gencode"]  # arch=compute_90a,code=sm_90a\ns = "#not a comment"\n')
    assert "sm_90a" not in out
    assert '"-gencode"' in out
    assert '"#not a comment"' in out


@pytest.mark.parametrize(
    ("text", "ctx", "expected"),
    [
        ("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890", ArchContext(860), 0),
        ("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890", ArchContext(890), 1),
        ("__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)", ArchContext(900), 0),
        ("__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)", ArchContext(900, True, True), 1),
        ("defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000",
         ArchContext(1000, False, True), 1),
        ("__CUDA_ARCH_HAS_FEATURE__(SM100_ALL)", ArchContext(1000, True, True), 1),
        ("(__CUDA_ARCH__ >= 800) ? 1 : 0", ArchContext(750), 0),
        ("defined(FOO) && __CUDA_ARCH__ >= 890", ArchContext(890), None),  # FOO unknown
        ("defined(FOO) && __CUDA_ARCH__ >= 890", ArchContext(800), 0),  # false whatever FOO is
        ("defined(FOO) || __CUDA_ARCH__ >= 800", ArchContext(800), 1),
        ("!defined(__HIP_PLATFORM_AMD__) && __CUDACC_VER_MAJOR__ >= 12", ArchContext(800), None),
        ("0x10 > 010", ArchContext(800), 1),
    ],
)
def test_conditions_evaluate_with_three_values(text, ctx, expected) -> None:
    expr = parse_expr(text)
    assert expr is not None
    assert evaluate(expr, Scope(ctx)) == expected


def _expr(text: str) -> Expr:
    parsed = parse_expr(text)
    assert parsed is not None, text
    return parsed


def test_derived_feature_macros_evaluate_through_their_definition() -> None:
    aliases = {"HAS_FP8": _expr("__CUDA_ARCH__ >= 890")}
    assert evaluate(_expr("defined(HAS_FP8)"), Scope(ArchContext(890), aliases)) == 1
    assert evaluate(_expr("defined(HAS_FP8)"), Scope(ArchContext(860), aliases)) == 0
    loop = {"A": _expr("defined(B)"), "B": _expr("defined(A)")}
    assert evaluate(_expr("defined(A)"), Scope(ArchContext(800), loop)) is None


def test_unparseable_condition_is_none() -> None:
    assert parse_expr("__CUDA_ARCH__ >= ") is None


def test_directive_structure_and_dead_blocks() -> None:
    code = strip_c(
        "#if 0\nint dead;\n#endif\n"
        "#if 1\nint live;\n#else\nint dead2;\n#endif\n"
        "#if defined(__CUDA_ARCH__) && \\\n    __CUDA_ARCH__ >= 800\nA\n#elif __CUDA_ARCH__ >= 700\nB\n#else\nC\n#endif\n"
        '#define FEATURE 1 // comment\n#include "x.h"\n'
    )
    d = scan_directives(code)
    assert d.dead == {2, 7}
    gate = d.chains[2]
    assert [b.line for b in gate.branches] == [9, 12, 14]
    assert [b.body for b in gate.branches] == [(11, 12), (13, 14), (15, 16)]  # after the continuation
    assert gate.end_line == 16
    assert gate.has_else()
    assert {9, 10, 12, 14, 16} <= d.directive_lines
    assert d.defines == [(17, "FEATURE", "1")]
    assert 18 in d.directive_lines  # the #include


# The fast scans against the regular expressions that define them (re runs these ten times slower
# on a large header, so the lint does not use them; the meaning must not move).
EDGES = [
    "#if X\n", "  \t#  if X // c\n#endif\n", "x = 1; # if not a directive\n", "# #define X 1\n",
    "#/* c */if A /* d */ && B // e\n#else // f\n#endif /* g */\n", "#define M(a) \\\n  # a // x\n#include <a/b.h>\n",
    "\f#if X\n", "#\n#  \n#!shebang\n", "int a; /* #if X */\n", "#if A\\\n// not a comment of a directive\n#endif",
    "", "#", "\n#ifdef Y", 'char s[] = "#if X"; // #if Y\n',
]


@pytest.mark.parametrize("text", EDGES)
def test_directive_scans_mean_what_the_multiline_patterns_say(text) -> None:
    blank = lambda m: re.sub(r"//[^\n]*|/\*.*?\*/", lambda c: " " * len(c.group()), m.group())  # noqa: E731
    assert strip_directive_comments(text) == re.sub(r"(?m)^[ \t]*#[^\n]*", blank, text)
    words = [(m.start(), m[1]) for m in re.finditer(r"(?m)^[ \t]*#[ \t]*(\w+)([^\n]*)", text)]
    assert [w for _, _, w, _ in directive_lines(text)] == [w for _, w in words]


@pytest.mark.parametrize("text", ["__CUDA_ARCH__", "x NV_IF_TARGET(", "NV_DISPATCH_TARGET", "float_e4m3_t", "E5M2",
                                  "xe5m2", "4m3 at the start", "e4m2", "E4m3", "5M2", "e", "", "NV_IF", "__CUDA_ARC"])
def test_may_gate_is_the_trigger_pattern(text) -> None:
    assert may_gate(text) == bool(re.search(r"__CUDA_ARCH|NV_IF_|NV_DISPATCH_TARGET|[eE][45][mM][23]", text))
